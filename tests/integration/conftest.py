"""pytest setup shared by the integration tests: a file that collects no test fails (exit status 1,
not pytest's 5, which a runner could mistake for "nothing to do"), `workdir` is one temp dir per
test file (files that train once and check many things share it), and `note` lines (timings,
measured errors) are printed in the summary even under -q. Run under Debian's
/usr/bin/python3 -m pytest (see tests/CMakeLists.txt)."""
import pytest

pytest.register_assert_rewrite("harness", "slurm_helpers", "prep_tools")

_notes = []


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, request):
    """One directory per test file, e.g. /tmp/pytest-of-root/pytest-3/test_resume_bitwise0."""
    return str(tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2]))


@pytest.fixture(scope="session")
def note():
    """note("text"): a line shown in the summary of the run, passed or failed."""
    return _notes.append


def pytest_terminal_summary(terminalreporter):
    for line in _notes:
        terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nerror: no test collected from {' '.join(session.config.args)}: an integration "
              "test file must define test_* functions (a script body does not count)", flush=True)

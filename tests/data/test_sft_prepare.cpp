// tests/data/test_sft_prepare.cpp — the sft_prepare binary end to end: a good JSONL file gives
// exit 0, a summary and a file Dataset reads; bad input gives exit 2, one `error:` line naming
// file and line, and no output file (nor a temporary one) left behind. Every user error is exactly
// one stderr line that starts with `error:` (SPEC §2).
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "data/tokenizer.h"
#include "sftdp/data.h"

namespace {

using sftdp::test::run_command;

class SftPrepare : public ::testing::Test {
 protected:
  sftdp::test::TempDir dir;
  std::string jsonl = dir / "train.jsonl", h5 = dir / "out/train.h5";

  sftdp::test::CommandResult prepare(const std::string& extra) {
    return run_command(sftdp::test::binary("sft_prepare") + " --input " + jsonl + " --output " +
                       h5 + " " + extra);
  }
};

// Runs sft_prepare with `args`; output holds its stderr only (stdout is discarded).
sftdp::test::CommandResult prepare_stderr(const std::string& args) {
  return run_command("{ " + sftdp::test::binary("sft_prepare") + " " + args +
                     " 2>&1 >/dev/null; }");
}

// A user error is one line on stderr that starts with "error: " and names `what`.
void expect_one_error_line(const sftdp::test::CommandResult& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << "stderr: " << r.output;
  ASSERT_FALSE(r.output.empty());
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not exactly one line: " << r.output;
  EXPECT_CONTAINS(r.output, what);
}

TEST_F(SftPrepare, GoodFileExitsZeroAndIsReadableByDataset) {
  sftdp::test::write_file(jsonl,
                          "{\"prompt\": \"12+30=\", \"completion\": \"42\"}\n"
                          "{\"prompt\": \"rev:abc=\", \"completion\": \"cba\"}\n"
                          "{\"prompt\": \"this prompt is far too long for T=16\", "
                          "\"completion\": \"x\"}\n");
  const auto r = prepare("--max-length 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "3 examples, 2 rows of T=16");
  EXPECT_CONTAINS(r.output,
                  "dropped (longer than 17 tokens): 1, truncated: 0, completion tokens: 7");

  sftdp::data::Dataset ds({h5}, 16, sftdp::data::tok::kVocabSize, 16);
  ASSERT_EQ(ds.rows(), 2);
  sftdp::data::Batch batch;
  ds.read_rows({1}, batch);
  EXPECT_EQ(sftdp::data::tok::render(batch.inputs),
            "<|bos|>rev:abc=cba<|pad|><|pad|><|pad|><|pad|>");
  EXPECT_EQ(sftdp::data::tok::render(batch.targets),
            "rev:abc=cba<|eos|><|pad|><|pad|><|pad|><|pad|>");
  // targets r e v : a b c = are the prompt (0); c b a <|eos|> are the completion (1).
  const std::vector<float> weights = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};
  EXPECT_EQ(batch.loss_weights, weights);
  EXPECT_FALSE(batch.has_segments());
  EXPECT_EQ(sftdp::test::list_files(dir / "out"), std::vector<std::string>{h5});
}

TEST_F(SftPrepare, PackAndTruncateOptions) {
  sftdp::test::write_file(jsonl,
                          "{\"prompt\": \"a\", \"completion\": \"b\"}\n"
                          "{\"prompt\": \"c\", \"completion\": \"d\"}\n"
                          "{\"prompt\": \"0123456789\", \"completion\": \"xyz\"}\n");
  const auto r = prepare("--max-length 8 --pack --overflow truncate");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "3 examples, 2 rows of T=8 (packed)");
  EXPECT_CONTAINS(r.output, "truncated: 1");
  sftdp::data::Dataset ds({h5}, 8, sftdp::data::tok::kVocabSize, 8);
  sftdp::data::Batch batch;
  ds.read_rows({0}, batch);
  ASSERT_TRUE(batch.has_segments());
  EXPECT_EQ(batch.segment_ids, (std::vector<int32_t>{1, 1, 1, 2, 2, 2, 0, 0}));
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 0}));
}

TEST_F(SftPrepare, BadJsonLineExitsTwoNamingTheLineAndWritesNothing) {
  sftdp::test::write_file(jsonl,
                          "{\"prompt\": \"a\", \"completion\": \"b\"}\n"
                          "{\"prompt\": \"c\", \"completion\": \"d\"}\n"
                          "{\"prompt\": \"e\", \"completion\": \n");
  const auto r = prepare_stderr("--input " + jsonl + " --output " + h5 + " --max-length 16");
  expect_one_error_line(r, "error: " + jsonl + ":3: invalid JSON");
  EXPECT_FALSE(sftdp::test::file_exists(h5));
  EXPECT_TRUE(sftdp::test::list_files(dir / "out").empty());
}

TEST_F(SftPrepare, MissingFieldExitsTwoWithLineNumber) {
  sftdp::test::write_file(jsonl, "{\"prompt\": \"a\", \"answer\": \"b\"}\n");
  const auto r = prepare_stderr("--input " + jsonl + " --output " + h5 + " --max-length 16");
  expect_one_error_line(r, "error: " + jsonl + ":1: missing \"completion\"");
  EXPECT_FALSE(sftdp::test::file_exists(h5));
}

TEST_F(SftPrepare, UsageErrorsExitTwo) {
  sftdp::test::write_file(jsonl, "{\"prompt\": \"a\", \"completion\": \"b\"}\n");
  const std::string files = "--input " + jsonl + " --output " + h5 + " ";
  for (const auto& [extra, what] : std::vector<std::pair<std::string, std::string>>{
           {"", "--input, --output and --max-length are required"},
           {"--max-length 0", "--max-length: expected a positive integer"},
           {"--max-length 8 --overflow keep", "--overflow: expected drop or truncate"},
           {"--max-length 8 --shuffle", "unknown argument \"--shuffle\""},
           {"--max-length", "--max-length: needs a value"}}) {
    SCOPED_TRACE(extra);
    expect_one_error_line(prepare_stderr(files + extra), what);
  }
  expect_one_error_line(
      prepare_stderr("--input " + (dir / "none.jsonl") + " --output " + h5 + " --max-length 8"),
      "none.jsonl: not found");
  EXPECT_FALSE(sftdp::test::file_exists(h5));
}

TEST_F(SftPrepare, OutputThatIsTheInputIsRefusedAndTheInputKept) {
  const std::string text = "{\"prompt\": \"a\", \"completion\": \"b\"}\n";
  sftdp::test::write_file(jsonl, text);
  std::filesystem::create_symlink(jsonl, dir / "link.jsonl");
  for (const std::string& output :
       {jsonl, dir / "./train.jsonl", dir / "out/../train.jsonl", dir / "link.jsonl"}) {
    SCOPED_TRACE(output);
    std::filesystem::create_directories(dir / "out");
    expect_one_error_line(
        prepare_stderr("--input " + jsonl + " --output " + output + " --max-length 8"),
        "error: --output: is the same file as --input");
    EXPECT_EQ(sftdp::test::read_file(jsonl), text);
    EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.jsonl"));
  }
  // The input named through the link is the same file too.
  expect_one_error_line(
      prepare_stderr("--input " + (dir / "link.jsonl") + " --output " + jsonl + " --max-length 8"),
      "error: --output: is the same file as --input");
  EXPECT_EQ(sftdp::test::read_file(jsonl), text);
}

TEST_F(SftPrepare, HelpDocumentsFormatsAndTokenTable) {
  const auto r = run_command(sftdp::test::binary("sft_prepare") + " --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* text : {"--max-length", "--overflow", "--pack", "\"messages\"", "<|bos|>",
                           "<|assistant|>", "<|end|>", "vocab_size = 264"})
    EXPECT_CONTAINS(r.output, text);
}

}  // namespace

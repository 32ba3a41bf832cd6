# coil: one plain Makefile.  `make demo` runs the main job, `make test` the tests.
CC      = gcc
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -fPIC \
           -Iinclude -I. -fno-strict-aliasing $(CFLAGS_EXTRA)
override LDLIBS += -ljansson -lsqlite3 -lcrypto -ldnnl -lcurl -lseccomp -ldl -lm -pthread
B       ?= build

COMMON_SRC  := $(wildcard common/*.c)
CODEGEN_SRC := $(wildcard codegen/*.c codegen/rt/*.c)
CACHE_SRC   := $(wildcard cache/*.c)
CLIENT_SRC  := $(filter-out client/cli.c,$(wildcard client/*.c))
LIB_SRC     := $(COMMON_SRC) $(CODEGEN_SRC) $(CACHE_SRC) $(CLIENT_SRC)
LIB_OBJ     := $(LIB_SRC:%.c=$(B)/%.o) $(B)/gen/rt_source.o
TEST_SRC    := $(wildcard tests/test_*.c)
TEST_BIN    := $(TEST_SRC:tests/%.c=$(B)/tests/%)
SERVER_OBJ  := $(patsubst %.c,$(B)/%.o,$(wildcard server/*.c))

.PHONY: all deps test demo asan ubsan clean check-tests bench-load fuzz fuzzers soak bench-crash install bench-farm
all: $(B)/coil $(B)/coild $(TEST_BIN)

deps:
	@sh deploy/install-deps.sh

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The cache key includes a digest of the code generator's sources, so any change
# to what coil emits misses the cache instead of returning stale artifacts.
CODEGEN_DEPS := $(sort $(wildcard codegen/*.c codegen/*.h codegen/rt/*.c codegen/rt/*.h include/coil/artifact.h))
CODEGEN_HASH := $(shell cat $(CODEGEN_DEPS) | sha256sum | cut -c1-16)
$(B)/cache/compile.o: $(CODEGEN_DEPS)
$(B)/cache/compile.o: override CFLAGS += -DCOIL_CODEGEN_HASH=\"$(CODEGEN_HASH)\"

# The oneDNN runtime's source (codegen/rt), embedded in libcoil: build.c writes
# it beside each generated model.c, so artifacts never depend on the repo path.
$(B)/gen/rt_source.c: codegen/rt/embed.sh codegen/rt/dnnl_rt.h codegen/rt/dnnl_rt.c
	@mkdir -p $(dir $@)
	sh codegen/rt/embed.sh coil_rt_dnnl_h codegen/rt/dnnl_rt.h coil_rt_dnnl_c codegen/rt/dnnl_rt.c > $@.tmp
	mv $@.tmp $@
$(B)/gen/rt_source.o: $(B)/gen/rt_source.c
	$(CC) $(CFLAGS) -c $< -o $@

# vec.c embeds codegen/vmath.h (.incbin) into every artifact.
$(B)/codegen/vec.o: codegen/vmath.h codegen/attn.h common/upsample.h codegen/rnn.h codegen/fft.h

$(B)/libcoil.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/coil: $(B)/client/cli.o $(B)/libcoil.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# coild, the compile server (server/), on libmicrohttpd.
$(B)/coild: $(SERVER_OBJ) $(B)/libcoil.a
	$(CC) $(CFLAGS) -o $@ $^ -lmicrohttpd $(LDLIBS)

# test_server starts a real coild; test_crash kills it, and runs `coil cache verify`.
$(B)/tests/test_server: | $(B)/coild
$(B)/tests/test_crash: | $(B)/coild $(B)/coil

# test_sandbox's stand-in compiler, built without sanitizers: it runs under
# the sandbox's RLIMIT_AS, where ASan could not start.
$(B)/tests/fake_cc: tests/sandbox/fake_cc.c
	@mkdir -p $(dir $@)
	$(CC) -O1 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -o $@ $<
$(B)/tests/test_sandbox: | $(B)/tests/fake_cc $(B)/coil

# test_fault puts a switch in front of these (link-time wrapping: nothing in
# the production code knows), and runs the stand-in compiler.
FAULT_WRAP := malloc calloc realloc strdup free open read write fsync rename mkdir mkdtemp fopen \
	      sqlite3_open_v2 sqlite3_prepare_v2 sqlite3_step fork dlopen
$(B)/tests/test_fault: override LDLIBS += $(foreach f,$(FAULT_WRAP),-Wl,--wrap=$(f))
$(B)/tests/test_fault: | $(B)/tests/fake_cc

$(B)/tests/%: $(B)/tests/%.o $(B)/libcoil.a
	$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(LDLIBS)

# test_dnnl_rt once more, it and the runtime built for x86-64-v3 (AVX2 + FMA)
# as artifacts for such a CPU build the runtime: the code only that build
# takes (the SiLU tail's vector code; coil's Winograd and grouped convs by
# default) is tested by the suite itself, not only through models.  Built
# where this CPU has AVX2 and FMA.
V3_CPU := $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo && echo 1)
V3_OBJ := $(B)/v3/tests/test_dnnl_rt.o $(B)/v3/codegen/rt/dnnl_rt.o
ifeq ($(V3_CPU),1)
all: $(B)/tests/test_dnnl_rt_v3
endif
$(B)/v3/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -march=x86-64-v3 -MMD -MP -c $< -o $@
$(B)/tests/test_dnnl_rt_v3: $(V3_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ -lcmocka -ldnnl -lm -ldl

# ---- fuzzing ----
# Targets in tests/fuzz/fuzz_NAME.c.  `make test` replays their corpus and
# regressions with gcc (test_fuzz_replay); `make fuzz` builds them with clang
# and libFuzzer (+ASan, UBSan) into build-fuzz/ and runs each FUZZ_TIME s.
FUZZ_TARGETS := graph http safetensors
FUZZ_OBJ     := $(FUZZ_TARGETS:%=$(B)/tests/fuzz/fuzz_%.o)
# The server code fuzz_http drives: pure parsing, no libmicrohttpd calls.
PARSE_OBJ    := $(B)/server/parse.o $(B)/server/auth.o $(B)/server/config.o
FUZZ_B       ?= build-fuzz
FUZZ_TIME    ?= 60
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined

$(B)/tests/test_fuzz_replay: $(B)/tests/test_fuzz_replay.o $(FUZZ_OBJ) $(PARSE_OBJ) $(B)/libcoil.a
	$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(LDLIBS)

$(B)/fuzz_%: $(B)/tests/fuzz/fuzz_%.o $(PARSE_OBJ) $(B)/libcoil.a
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

fuzzers: $(FUZZ_TARGETS:%=$(B)/fuzz_%)

fuzz:
	@sh deploy/install-deps.sh fuzz
	$(MAKE) B=$(FUZZ_B) CC=clang CFLAGS="-O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SAN) -DCOIL_LIBFUZZER" \
		CFLAGS_EXTRA=-Wno-error fuzzers
	@FUZZ_B=$(FUZZ_B) FUZZ_TIME=$(FUZZ_TIME) sh tests/fuzz/run.sh $(FUZZ_TARGETS)

# Every suite, then one line "N passed, N failed, N skipped".  The hardening suites run
# a second time built with ASan+UBSan (SAN_B; `make asan`/`make ubsan` run
# everything under one sanitizer each, outside `make test`).
SAN_B      ?= build-san
SAN_CFLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SAN_SUITES := test_fuzz_replay test_sandbox test_fault test_cache test_server
test: deps
	$(MAKE) all
	$(MAKE) B=$(SAN_B) CFLAGS="$(SAN_CFLAGS)" all
	@B=$(B) SAN_B=$(SAN_B) SAN_SUITES="$(SAN_SUITES)" sh tests/run.sh

check-tests: all
	@B=$(B) sh tests/run.sh

asan:
	$(MAKE) B=build-asan OPT="-O1" CFLAGS="-O1 -g -fsanitize=address -fno-omit-frame-pointer" \
		check-tests

ubsan:
	$(MAKE) B=build-ubsan OPT="-O1" CFLAGS="-O1 -g -fsanitize=undefined -fno-sanitize-recover=all" \
		check-tests

demo: deps all
	@B=$(B) sh examples/demo.sh

# Generated kernels vs PyTorch eager on 1 and 2 threads, with the copy bandwidth of
# the same run (bench/kernels/run.py); writes bench/results/kernels.md.
.PHONY: bench-kernels
bench-kernels: all
	/usr/bin/python3 bench/kernels/run.py --coil $(B)/coil $(BENCH_ARGS)

# Soak: 256 connections for 60 s mixing cached fetches, cached compiles and
# new compiles; errors, requests/s, p99, coild's RSS at start and end.
$(B)/bench/soak: bench/soak/soak.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< -lcurl -ljansson -pthread

soak: all $(B)/bench/soak
	@B=$(B) sh bench/soak/run.sh

# Crash safety at length: the kill loop of tests/test_crash.c, 500 rounds.
bench-crash: all
	COIL_KILL_ROUNDS=$${COIL_KILL_ROUNDS:-500} CMOCKA_MESSAGE_OUTPUT=TAP $(B)/tests/test_crash

# make install [PREFIX=/usr/local] [DESTDIR=]: the CLI and coild, libcoil (header and static
# library), the Python package, the systemd unit and the nginx farm files (docs/fleet.md).
PREFIX ?= /usr/local
PYDIR  ?= $(PREFIX)/lib/python3/dist-packages
install: $(B)/coil $(B)/coild $(B)/libcoil.a
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include/coil $(DESTDIR)$(PREFIX)/lib \
		$(DESTDIR)$(PREFIX)/share/coil/nginx $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(PYDIR)/coil
	install -m 755 $(B)/coil $(B)/coild $(DESTDIR)$(PREFIX)/bin/
	install -m 644 include/coil/*.h $(DESTDIR)$(PREFIX)/include/coil/
	install -m 644 $(B)/libcoil.a $(DESTDIR)$(PREFIX)/lib/
	install -m 644 client/python/coil/*.py $(DESTDIR)$(PYDIR)/coil/
	install -m 644 client/python/coil_*.py $(DESTDIR)$(PYDIR)/
	install -m 644 deploy/nginx/*.conf $(DESTDIR)$(PREFIX)/share/coil/nginx/
	sed 's|/usr/local/bin/coild|$(PREFIX)/bin/coild|' deploy/coild.service >$(DESTDIR)$(PREFIX)/lib/systemd/system/coild.service

# The farm benchmark (bench/farm): 1 coild against 3 behind nginx under the same wrk load.
bench-farm: all
	/usr/bin/python3 bench/farm/run.py

# Load test of coild against nginx (wrk); not part of `make test`.
bench-load: all
	@B=$(B) sh bench/load/run.sh

# The model suite (bench/models/run.py): pass rate and speedup of coil.compile over eager and
# TorchScript on torchvision and transformer models; writes bench/results/models.{md,png,json}.
# Hours on a small machine, resumable (results cached per model). QUICK=1: four small models
# in a few minutes (bench/results/models-quick.*). BENCH_ARGS: more run.py options.
.PHONY: bench-models
bench-models: all
	@dpkg-query -W -f='$${Status}' python3-matplotlib 2>/dev/null | grep -q "install ok installed" || \
		{ [ "$$(id -u)" -eq 0 ] && S= || S=sudo; DEBIAN_FRONTEND=noninteractive $$S apt-get install -y -qq \
		--no-install-recommends python3-matplotlib >/dev/null; }
	COIL=$(B)/coil /usr/bin/python3 bench/models/run.py $(if $(QUICK),--quick) $(BENCH_ARGS)

clean:
	rm -rf build build-asan build-ubsan build-fuzz build-san

-include $(LIB_OBJ:.o=.d) $(B)/client/cli.d $(TEST_BIN:=.d) $(SERVER_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d) $(V3_OBJ:.o=.d)

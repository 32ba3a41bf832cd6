# coil: one plain Makefile.  `make demo` runs the main job, `make test` the tests.
CC      = gcc
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -fPIC \
           -Iinclude -I. -fno-strict-aliasing
override LDLIBS += -ljansson -lsqlite3 -lcrypto -ldnnl -lcurl -ldl -lm -pthread
B       ?= build

COMMON_SRC  := $(wildcard common/*.c)
CODEGEN_SRC := $(wildcard codegen/*.c codegen/rt/*.c)
CACHE_SRC   := $(wildcard cache/*.c)
CLIENT_SRC  := $(filter-out client/cli.c,$(wildcard client/*.c))
LIB_SRC     := $(COMMON_SRC) $(CODEGEN_SRC) $(CACHE_SRC) $(CLIENT_SRC)
LIB_OBJ     := $(LIB_SRC:%.c=$(B)/%.o)
TEST_SRC    := $(wildcard tests/test_*.c)
TEST_BIN    := $(TEST_SRC:tests/%.c=$(B)/tests/%)
SERVER_OBJ  := $(patsubst %.c,$(B)/%.o,$(wildcard server/*.c))

.PHONY: all deps test demo asan ubsan clean check-tests bench-load
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

$(B)/libcoil.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/coil: $(B)/client/cli.o $(B)/libcoil.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# coild, the compile server (server/), on libmicrohttpd.
$(B)/coild: $(SERVER_OBJ) $(B)/libcoil.a
	$(CC) $(CFLAGS) -o $@ $^ -lmicrohttpd $(LDLIBS)

# test_server starts a real coild.
$(B)/tests/test_server: | $(B)/coild

$(B)/tests/%: $(B)/tests/%.o $(B)/libcoil.a
	$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(LDLIBS)

# Every suite, then one line "N passed, N failed".
test: deps
	$(MAKE) all
	@B=$(B) sh tests/run.sh

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

# Load test of coild against nginx (wrk); not part of `make test`.
bench-load: all
	@B=$(B) sh bench/load/run.sh

clean:
	rm -rf build build-asan build-ubsan

-include $(LIB_OBJ:.o=.d) $(B)/client/cli.d $(TEST_BIN:=.d) $(SERVER_OBJ:.o=.d)

# seckilld - flash-sale HTTP service.
#
#   make run       install deps, start private MariaDB + Redis, build, serve :8080
#   make test      the same set-up on a test database, then every test, plain
#                  and under SANITIZE=address,undefined, and the layering
#                  test (make layering)
#   make services  only start MariaDB + Redis and write .run/env
#   make stop      stop them
#   make bench-lock  lock backends: pairs/s, p50/p99, ratio to redis-benchmark
#   make bench     the flash sale against sysbench, nginx and redis-benchmark
#                  (docs/performance.md); make bench-jmeter: the JMeter plan
#   make bench-crowd  the crowd phase alone: idle keep-alive connections
#                  on one instance while 256 buy (bench/crowd.sh)
#   make bench-fairness  people and bots buying a queue sale and an open one:
#                  the bots' share of the orders (docs/performance.md)
#   make bench-paystorm  every buyer of a sale pays at once: payments/s
#                  next to the sale's purchases/s (docs/performance.md)
#   make bench-spider  the purchase transaction through MariaDB's Spider
#                  engine beside the same on one MariaDB (docs/scaling.md)
#   make test-faults the fault-injection suite (tests/faults; not in make test)
#   make soak      the nemesis: a randomized, history-checked run of three
#                  instances behind haproxy (tests/soak; SOAK_MINUTES,
#                  SOAK_SEED, SOAK_CANARY=1, SOAK_REDIS=sentinel|cluster,
#                  SOAK_MYSQL_SHARDS=1|2, SOAK_HOSTNAME=shared|own; not in
#                  make test)
#   make stress    the two-instance crowd 30 times in a row, plain and ASan
#   make cluster N=3  N instances behind haproxy on loopback (scripts/cluster.sh);
#                  make cluster-roll restarts them in turn, make cluster-stop
#   make test-cluster a Redis Cluster of 3 primaries + 3 replicas on loopback
#                  (scripts/redis-cluster.sh) and the routing's test against
#                  it, and the service on it (tests/it/test_redis_cluster.c,
#                  ~15 s); the lock
#                  contract suite on it (test_lock.c with LOCK_TEST_CLUSTER,
#                  ~47 s; also starts make services); two MariaDB primaries
#                  (scripts/mysql-shards.sh) and the shards' test
#                  (tests/it/test_mysql_shards.c; none in make test). About
#                  a minute in all, the cluster and the shards started cold
#   make test-compose the Dockerfile and docker-compose.yml for real (podman)
#   make fuzz      libFuzzer harnesses (clang), FUZZ_SECONDS (60) each;
#                  make fuzz-smoke is the same for 5 s each (part of make test)
#   make test-web  the pages in headless Chromium and docs/openapi.yaml against
#                  live traffic (part of make test; tests/web/run.sh)
#   make openapi   write docs/openapi.json (served at /openapi.json) from
#                  docs/openapi.yaml
#   make test-docs every relative link of README.md and docs/*.md resolves,
#                  anchors included (tests/docs/links.sh; part of make test)
#   make config-docs write the settings table of docs/configuration.md and
#                  the man page docs/seckilld.8 from the settings table of
#                  cmd/config.c
#   make schema    write sql/schema.sql from sql/migrations/ (a scratch
#                  database migrated and dumped); make schema-check (part
#                  of make test) fails while they differ
#   make install   the service under DESTDIR/PREFIX (/usr/local): the
#                  binary, the SQL files, the man page, the systemd unit and
#                  an example of its settings file; make test-install checks
#                  such an installation (part of make test)
#   make deb       the Debian packages seckilld and libseckill-lock-dev
#                  (debian/; dpkg-buildpackage on a copy of the tree,
#                  then lintian) into build/deb; make test-deb installs
#                  them in a Debian 12 container and runs the service from
#                  its unit's ExecStart (tests/deb; not in make test)
#   make test-alerts check deploy/prometheus/alerts.yml and its unit tests
#                  with promtool (part of make test)
#   make test-prometheus a real prometheus scraping a running seckilld
#                  every second until its API reports up == 1, and
#                  promtool check metrics on the /metrics text (part of
#                  make test)
#   make lock-lib  the lock library: libseckill-lock.a and its example
#                  (docs/locks.md); make install-lock-lib puts the archive,
#                  its header and seckill-lock.pc under DESTDIR/PREFIX
#                  (/usr/local); make test-lock-lib builds the example from
#                  such an installation and runs it (part of make test)
#
# Variables: SANITIZE=address,undefined builds into build/san with sanitizers;
# WERROR=0 turns warnings back into warnings; V=1 shows compiler commands.
# FAILPOINTS=1 builds into build/fp with the test failpoints compiled in
# (common/failpoint.h).

SHELL := /bin/bash
CC ?= cc
SANITIZE ?=
WERROR ?= 1

FAILPOINTS ?=
ifneq ($(FAILPOINTS),)
BUILD ?= build/fp$(if $(SANITIZE),/san)
FPFLAGS := -DSECKILL_FAILPOINTS
endif

ifeq ($(SANITIZE),)
BUILD ?= build
SANFLAGS :=
else
BUILD ?= build/san
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined
endif

PKGS := libmicrohttpd jansson hiredis mysqlclient libsodium libcurl
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wformat=2 -Wvla -Wno-format-nonliteral
ifeq ($(WERROR),1)
WARN += -Werror
endif

# Evaluated on use, so `make deps` works before the -dev packages exist.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
PKG_LIBS = $(shell pkg-config --libs $(PKGS))

# CPPFLAGS and LDFLAGS as well: a distribution's build passes its
# hardening flags in them (dpkg-buildflags: -D_FORTIFY_SOURCE=2, -z relro).
CFLAGS ?= -O2 -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -I. $(WARN) $(SANFLAGS) $(FPFLAGS) \
             $(CPPFLAGS) $(CFLAGS) $(PKG_CFLAGS) -MMD -MP
ALL_LDFLAGS = $(SANFLAGS) $(LDFLAGS)

ifeq ($(V),1)
Q :=
else
Q := @
endif
LIBS = $(PKG_LIBS) -lzookeeper_mt -lpthread

# The pages (web/) and the API description, compiled into the binary.
WEB_SRC := $(wildcard web/*.html web/static/*) docs/openapi.json
WEB_GEN := build/gen/web_files.c
# The schema migrations, compiled into the binary (seckilld migrate).
MIG_SRC := $(wildcard sql/migrations/*.sql)
MIG_GEN := build/gen/migrations.c

LIB_SRC := $(wildcard common/*.c store/*.c lock/*.c idgen/*.c engine/*.c async/*.c \
                     sale/*.c handlers/*.c) \
           cmd/config.c cmd/config_doc.c cmd/server.c cmd/admin.c cmd/users.c \
           cmd/sms_sink.c cmd/migrate.c $(WEB_GEN) $(MIG_GEN)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
MAIN_OBJ := $(BUILD)/obj/cmd/main.o

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/unit_%)
# The Redis Cluster and MariaDB shards tests run on servers of their own:
# make test-cluster.
IT_CLUSTER_SRC := tests/it/test_redis_cluster.c tests/it/test_mysql_shards.c
IT_SRC := $(filter-out $(IT_CLUSTER_SRC),$(wildcard tests/it/test_*.c))
IT_BIN := $(IT_SRC:tests/it/%.c=$(BUILD)/tests/it_%)
IT_HELPER_SRC := $(filter-out $(IT_SRC) $(IT_CLUSTER_SRC),$(wildcard tests/it/*.c))
IT_HELPER_OBJ := $(IT_HELPER_SRC:%.c=$(BUILD)/obj/%.o)

.PHONY: all build tests deps services stop run test test-unit test-it \
        test-san test-web web-deps openapi bench-lock bench bench-jmeter \
        faults test-faults format check-dockerfile stress bench-profile \
        cluster cluster-roll cluster-stop test-compose bench-scale test-cluster \
        bench-fairness bench-crowd bench-paystorm bench-spider \
        format-check clean soak soak-build layering config-docs test-docs \
        schema schema-check

all: build lock-lib

build: $(BUILD)/seckilld

$(BUILD)/seckilld: $(MAIN_OBJ) $(LIB_OBJ)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC  $<"
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The folders too, so that a deleted file is noticed.
$(WEB_GEN): scripts/embed-web.sh $(WEB_SRC) web web/static
	@mkdir -p $(@D)
	@echo "  GEN $@"
	$(Q)scripts/embed-web.sh $@

$(MIG_GEN): scripts/embed-sql.sh $(MIG_SRC) sql/migrations
	@mkdir -p $(@D)
	@echo "  GEN $@"
	$(Q)scripts/embed-sql.sh $@

# tcpproxy: test_soldout stalls an instance's backends with it.
tests: $(BUILD)/seckilld $(UNIT_BIN) $(IT_BIN) $(BUILD)/tools/tcpproxy

$(BUILD)/tests/unit_%: $(BUILD)/obj/tests/unit/%.o $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS) -lcmocka

$(BUILD)/tests/it_%: $(BUILD)/obj/tests/it/%.o $(IT_HELPER_OBJ) $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS) -lcmocka -lcurl

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- the lock library: lock/ for programs other than seckilld ----

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
OBJCOPY ?= objcopy
LOCK_VERSION ?= 1.0.0
# What the archive needs besides itself: seckill-lock.pc's Requires and
# Libs (it has no shared library, so they are not .private), and the
# example's link line here.
LOCK_REQUIRES := hiredis libmariadb libsodium
LOCK_LIBS := -lzookeeper_mt -lpthread

# lock/ and the helpers of common/ it calls (URL parser, Redis connect and
# scripts, MariaDB/MySQL flavours, allocation and logging), linked into one
# object whose only global symbols are lock.h's functions (lock_*; the
# internal lock__* and the helpers become local), so that a program with a
# log_write or url_parse of its own links. seckilld links the same objects
# directly, sharing the helpers with the rest of the service.
LOCK_LIB_SRC := $(wildcard lock/*.c) common/redis_conn.c common/redis_keys.c \
                common/redis_cluster.c common/metrics.c \
                common/redis_slot.c common/sqlflavour.c \
                common/url.c common/util.c
LOCK_LIB_OBJ := $(LOCK_LIB_SRC:%.c=$(BUILD)/obj/%.o)
LOCK_LIB := $(BUILD)/lib/libseckill-lock.a
LOCK_EXAMPLE := $(BUILD)/lock/examples/lock_example

.PHONY: lock-lib install-lock-lib test-lock-lib

lock-lib: $(LOCK_LIB) $(LOCK_EXAMPLE)

$(LOCK_LIB): $(LOCK_LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  AR  $@"
	$(Q)mkdir -p $(BUILD)/obj/lock-lib
	$(Q)$(LD) -r -o $(BUILD)/obj/lock-lib/all.o $^
	$(Q)$(OBJCOPY) --wildcard --keep-global-symbol='lock_[!_]*' \
	    $(BUILD)/obj/lock-lib/all.o $(BUILD)/obj/lock-lib/seckill-lock.o
	$(Q)rm -f $@ && $(AR) rcs $@ $(BUILD)/obj/lock-lib/seckill-lock.o

# The example includes <seckill/lock.h>, as from an installation.
$(BUILD)/include/seckill/lock.h: lock/lock.h
	@mkdir -p $(@D)
	$(Q)cp $< $@

# With the example's own flags, not the service's: what its users will have.
$(LOCK_EXAMPLE): lock/examples/lock_example.c $(BUILD)/include/seckill/lock.h \
                 $(LOCK_LIB)
	@mkdir -p $(@D)
	@echo "  CC  $@"
	$(Q)$(CC) -std=c11 $(WARN) $(SANFLAGS) $(CPPFLAGS) $(CFLAGS) \
	    $(LDFLAGS) -I$(BUILD)/include -o $@ $< $(LOCK_LIB) $(shell pkg-config --libs $(LOCK_REQUIRES)) \
	    $(LOCK_LIBS)

# The archive, lock.h as <seckill/lock.h> and seckill-lock.pc, under
# DESTDIR (for packaging) and PREFIX (or LIBDIR, INCLUDEDIR, PKGCONFIGDIR).
install-lock-lib: $(LOCK_LIB)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/seckill \
	    $(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 $(LOCK_LIB) $(DESTDIR)$(LIBDIR)/libseckill-lock.a
	install -m 644 lock/lock.h $(DESTDIR)$(INCLUDEDIR)/seckill/lock.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	    -e 's|@VERSION@|$(LOCK_VERSION)|g' \
	    -e 's|@REQUIRES@|$(LOCK_REQUIRES)|g' -e 's|@LIBS@|$(LOCK_LIBS)|g' \
	    lock/seckill-lock.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/seckill-lock.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/seckill-lock.pc

# The example built from a scratch installation with pkg-config's flags
# only, then run against the private servers (tests/lock-lib/run.sh),
# plain and under the sanitizers.
test-lock-lib: services
	@$(MAKE) --no-print-directory lock-lib
	@$(MAKE) --no-print-directory SANITIZE=address,undefined lock-lib
	@tests/lock-lib/run.sh build
	@tests/lock-lib/run.sh build/san

# ---- installing the service ----

# The directories, GNU-style. The binary goes to sbin: it is a daemon for
# the administrator to run (Debian puts nginx, haproxy and mariadbd
# there), documented in section 8. SYSCONFDIR is /etc for PREFIX=/usr, as
# a distribution package wants, and PREFIX/etc otherwise.
SBINDIR ?= $(PREFIX)/sbin
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system

.PHONY: install test-install test-alerts test-prometheus deb test-deb

# The binary, sql/ (the schema and its migrations, for reading: the
# binary carries the migrations and applies them, seckilld migrate), the
# Prometheus alert rules, the man page, seckilld.service with this
# installation's paths, and seckilld.env.example; a seckilld.env of the
# administrator's is never touched.
install: $(BUILD)/seckilld
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(DATADIR)/seckilld \
	    $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SYSTEMDUNITDIR) \
	    $(DESTDIR)$(SYSCONFDIR)/seckilld \
	    $(DESTDIR)$(DATADIR)/seckilld/migrations
	install -m 755 $(BUILD)/seckilld $(DESTDIR)$(SBINDIR)/seckilld
	install -m 644 sql/schema.sql $(DESTDIR)$(DATADIR)/seckilld/
	install -m 644 $(MIG_SRC) $(DESTDIR)$(DATADIR)/seckilld/migrations/
	install -m 644 deploy/prometheus/alerts.yml \
	    $(DESTDIR)$(DATADIR)/seckilld/prometheus-alerts.yml
	install -m 644 docs/seckilld.8 $(DESTDIR)$(MANDIR)/man8/seckilld.8
	sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	    deploy/seckilld.service.in \
	    > $(DESTDIR)$(SYSTEMDUNITDIR)/seckilld.service
	chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/seckilld.service
	install -m 644 deploy/seckilld.env.example \
	    $(DESTDIR)$(SYSCONFDIR)/seckilld/seckilld.env.example

# make install into a scratch DESTDIR, checked (tests/install/run.sh).
test-install: build
	@tests/install/run.sh

# The alert rules' syntax and their unit tests (promtool).
test-alerts:
	@tests/alerts/run.sh

# Debian's prometheus scrapes $(BUILD)/seckilld on loopback and loads the
# alert rules; promtool lints the exposition (tests/prometheus/run.sh).
test-prometheus: services
	@$(MAKE) --no-print-directory build
	@tests/prometheus/run.sh $(BUILD)

# ---- Debian packages ----

# debian/rules builds with this Makefile (make build lock-lib, make
# install install-lock-lib); scripts/deb.sh runs dpkg-buildpackage on a
# copy of the work tree and lintian on the result, in build/deb.
deb:
	@scripts/deps.sh deb
	@scripts/deb.sh build/deb

# The packages installed with apt-get in a clean Debian 12 container, the
# service started from the installed unit's ExecStart against the private
# servers, the README's walk-through, a stop by KillSignal; the lock
# library's example built with pkg-config; the source built again in a
# second clean container with only its Build-Depends (tests/deb/run.sh,
# 2 to 3 minutes).
test-deb: services
	@scripts/deps.sh deb containers
	@scripts/deb.sh build/deb
	@tests/deb/run.sh build/deb

# ---- the private servers ----

deps:
	@scripts/deps.sh

services: deps
	@scripts/services.sh up

stop:
	@scripts/services.sh down

run: services
	@$(MAKE) --no-print-directory build
	@. .run/env && exec $(BUILD)/seckilld

# ---- tests ----

# The whole suite, plain and then under the sanitizers.
test: services
	@$(MAKE) --no-print-directory test-docs
	@scripts/services.sh reset-test
	@$(MAKE) --no-print-directory tests
	@tests/layering/check.sh build
	@$(MAKE) --no-print-directory check-dockerfile
	@scripts/schema.sh --check
	@$(MAKE) --no-print-directory SANITIZE=address,undefined tests
	@tests/run.sh build build/san
	@$(MAKE) --no-print-directory test-lock-lib
	@$(MAKE) --no-print-directory test-install
	@$(MAKE) --no-print-directory test-alerts
	@$(MAKE) --no-print-directory test-prometheus
	@$(MAKE) --no-print-directory test-web
	@$(MAKE) --no-print-directory fuzz-smoke

# Both Dockerfile stages install every library the binary links; the
# second line proves the check notices a package taken out.
check-dockerfile: build
	@scripts/check-dockerfile.sh $(BUILD)/seckilld
	@sed '/libzookeeper/d' Dockerfile > $(BUILD)/Dockerfile.broken
	@if scripts/check-dockerfile.sh $(BUILD)/seckilld \
	        $(BUILD)/Dockerfile.broken >/dev/null 2>&1; then \
	    echo "check-dockerfile: a Dockerfile without libzookeeper passed"; \
	    exit 1; fi

# The documents' links and anchors, then the checker against a broken
# example (it must catch it).
test-docs:
	@tests/docs/links.sh
	@tests/docs/links.sh --self-test

test-unit: tests
	@tests/run.sh --unit $(BUILD)

# The folders call down, never back up (tests/layering/check.sh): from the
# include graph and nm on the objects of $(BUILD).
layering: build
	@tests/layering/check.sh $(BUILD)

# sql/schema.sql written from the migrations (scripts/schema.sh: a scratch
# database of the private MariaDB migrated and dumped); make test checks
# that it agrees.
schema: services
	@$(MAKE) --no-print-directory build
	@scripts/schema.sh

schema-check: services
	@$(MAKE) --no-print-directory build
	@scripts/schema.sh --check

test-it: services tests
	@scripts/services.sh reset-test
	@tests/run.sh --it $(BUILD)

test-san: services
	@scripts/services.sh reset-test
	@$(MAKE) --no-print-directory SANITIZE=address,undefined tests
	@tests/run.sh build/san

# ---- the pages and the API description (tests/web, docs/openapi.yaml) ----

# Chromium and Node.js from Debian, the npm packages of tests/package-lock.json.
web-deps:
	@scripts/deps.sh web
	@scripts/npm.sh

# The browser and OpenAPI tests against $(BUILD)/seckilld.
test-web: services web-deps
	@$(MAKE) --no-print-directory build
	@tests/web/run.sh $(BUILD)

# docs/openapi.json is what the binary serves; it is the YAML as JSON.
openapi: web-deps
	@REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
	    tests/node_modules/.bin/redocly bundle docs/openapi.yaml --ext json \
	    -o docs/openapi.json

# ---- fault injection: its own target, not part of make test ----

FAULTS_SRC := $(wildcard tests/faults/*.c)
FAULTS_OBJ := $(FAULTS_SRC:%.c=$(BUILD)/obj/%.o)

$(BUILD)/tests/faults: $(FAULTS_OBJ) $(IT_HELPER_OBJ) $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS) -lcmocka -lcurl

$(BUILD)/tools/tcpproxy: $(BUILD)/obj/tests/tools/tcpproxy.o
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -lpthread

faults: $(BUILD)/seckilld $(BUILD)/tests/faults $(BUILD)/tools/tcpproxy \
        soak-build

# Crashes, pauses, restarts and broken networks under load; prints a table
# and fails on any broken invariant (docs/reliability.md). Then a short
# canary soak: the checker must catch the failpoints planted in it.
test-faults: services
	@$(MAKE) --no-print-directory FAILPOINTS=1 faults
	@tests/faults/run.sh build/fp
	@tests/soak/run.sh --canary-check build/fp

# ---- the nemesis: its own target, not part of make test ----

# The soak's driver links the fault suite's backends, fleet and checks.
SOAK_SRC := $(wildcard tests/soak/*.c)
SOAK_OBJ := $(SOAK_SRC:%.c=$(BUILD)/obj/%.o) \
            $(addprefix $(BUILD)/obj/tests/faults/,backends.o load.o check.o)

$(BUILD)/tests/soak: $(SOAK_OBJ) $(IT_HELPER_OBJ) $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS) -lcmocka -lcurl

# Preloaded into the soak's instances and Redis servers: their connections
# to a Redis server go to a proxy of their own (no sanitizers in it).
$(BUILD)/tools/libredirect.so: tests/tools/redirect.c
	@mkdir -p $(@D)
	@echo "  CC  $@"
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -fPIC -shared -o $@ $< \
	    -ldl -lpthread

soak-build: $(BUILD)/seckilld $(BUILD)/tests/soak $(BUILD)/tools/tcpproxy \
            $(BUILD)/tools/libredirect.so

# SOAK_MINUTES (10) of faults and load, then the checks; SOAK_SEED replays
# a run's choices; SOAK_CANARY=1 plants two failpoints the checker must
# report (the run then fails); SOAK_REDIS (sentinel or cluster) and
# SOAK_MYSQL_SHARDS (1 or 2) set the deployment's shape, which the seed
# draws when they are unset. Needs the failpoint build;
# SANITIZE=address,undefined runs the instances under the sanitizers.
soak: services
	@$(MAKE) --no-print-directory FAILPOINTS=1 soak-build
	@tests/soak/run.sh build/fp$(if $(SANITIZE),/san)

# ---- a cluster on loopback: N instances behind haproxy ----

N ?= 3

cluster: services
	@$(MAKE) --no-print-directory build
	@BUILD=$(BUILD) scripts/cluster.sh up $(N)

cluster-roll:
	@BUILD=$(BUILD) scripts/cluster.sh roll

cluster-stop:
	@scripts/cluster.sh down

# ---- a Redis Cluster on loopback: its own target, not part of make test ----

# Three primaries and three replicas (scripts/redis-cluster.sh, left
# running; scripts/redis-cluster.sh down stops them), then the routing's
# test against them (common/redis_cluster.h). SANITIZE=address,undefined
# runs the sanitizer build of the test.
$(BUILD)/tests/cluster_test_redis_cluster: \
        $(BUILD)/obj/tests/it/test_redis_cluster.o $(IT_HELPER_OBJ) $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS) -lcmocka -lcurl

# The lock contract suite again (tests/it/test_lock.c with
# LOCK_TEST_CLUSTER): the redis backend on the cluster's URL, plus a slot
# moved under a held lock and the scripts' spread over the primaries. It
# also needs the servers of make services (MariaDB for the fencing test,
# Redis for a multi-lock across clients).
$(BUILD)/obj/tests/it/test_lock_cluster.o: tests/it/test_lock.c
	@mkdir -p $(@D)
	@echo "  CC  $< (LOCK_TEST_CLUSTER)"
	$(Q)$(CC) $(ALL_CFLAGS) -DLOCK_TEST_CLUSTER -c -o $@ $<

$(BUILD)/tests/cluster_test_lock: $(BUILD)/obj/tests/it/test_lock_cluster.o \
                                  $(IT_HELPER_OBJ) $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS) -lcmocka -lcurl

# Two MariaDB primaries (scripts/mysql-shards.sh, left running;
# scripts/mysql-shards.sh down stops them; the test runs its up too, a
# no-op by then), then seckilld migrate and the start-up checks on them.
$(BUILD)/tests/cluster_test_mysql_shards: \
        $(BUILD)/obj/tests/it/test_mysql_shards.o $(IT_HELPER_OBJ) $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS) -lcmocka -lcurl

test-cluster: $(BUILD)/tests/cluster_test_redis_cluster \
              $(BUILD)/tests/cluster_test_lock \
              $(BUILD)/tests/cluster_test_mysql_shards \
              $(BUILD)/tests/it_test_lifecycle $(BUILD)/tests/it_test_merged_orders \
              $(BUILD)/seckilld $(BUILD)/tools/tcpproxy services
	@scripts/redis-cluster.sh up
	@scripts/services.sh reset-test
	@set -a; . .run/env.test; set +a; SECKILL_BIN=$(BUILD)/seckilld \
	    CMOCKA_MESSAGE_OUTPUT=STDOUT $(BUILD)/tests/cluster_test_redis_cluster
	@# The order lifecycle (pay, cancel, expiry, refunds; merged lanes) with
	@# the store and the purchase lock on the cluster: the same tests as
	@# make test's, which talk to the service and MySQL only.
	@for t in lifecycle merged_orders; do \
	    scripts/services.sh reset-test && \
	    (set -a; . .run/env.test; set +a; \
	     SECKILL_REDIS_URL=$$(scripts/redis-cluster.sh url) SECKILL_LOCK_URL= \
	     SECKILL_BIN=$(BUILD)/seckilld CMOCKA_MESSAGE_OUTPUT=STDOUT \
	     $(BUILD)/tests/it_test_$$t) || exit 1; \
	done
	@scripts/services.sh reset-test
	@set -a; . .run/env.test; set +a; \
	    SECKILL_LOCK_CLUSTER_URL=$$(scripts/redis-cluster.sh url) \
	    CMOCKA_MESSAGE_OUTPUT=STDOUT $(BUILD)/tests/cluster_test_lock
	@scripts/mysql-shards.sh up
	@# The failpoint build: an instance killed between a shard's commit
	@# and the move of shard 0's rows out of its outbox.
	@$(MAKE) --no-print-directory FAILPOINTS=1 build/fp/seckilld
	@CMOCKA_MESSAGE_OUTPUT=STDOUT SECKILL_BIN=$(BUILD)/seckilld \
	    SECKILL_FP_BIN=build/fp/seckilld \
	    $(BUILD)/tests/cluster_test_mysql_shards

# ---- containers: its own target, not part of make test ----

# Builds the image with podman, brings docker-compose.yml up (database,
# Redis, two app replicas, haproxy) with local stand-ins for the database
# images, runs the README's walk-through and a crowd through haproxy,
# checks MySQL, tears down (tests/compose/run.sh).
test-compose:
	@scripts/deps.sh containers
	@tests/compose/run.sh

# ---- stress: its own target, not part of make test ----

$(BUILD)/tests/stress: $(BUILD)/obj/tests/stress/stress.o $(IT_HELPER_OBJ) \
                       $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS) -lcmocka -lcurl

# The two-instance crowd of 1,000 purchases STRESS_ROUNDS (30) times in a
# row, plain and under the sanitizers; fails on a request without an
# answer within 10 s or a broken invariant.
stress: services
	@scripts/services.sh reset-test
	@$(MAKE) --no-print-directory build $(BUILD)/tests/stress
	@$(MAKE) --no-print-directory SANITIZE=address,undefined build \
	    build/san/tests/stress
	@tests/stress.sh build build/san

# ---- benchmarks ----

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD  $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS)

# Lock backends side by side with redis-benchmark; ends "lock-ratio redis=".
bench-lock: services
	@$(MAKE) --no-print-directory $(BUILD)/bench/lock_bench
	@bench/lock.sh $(BUILD)

# The flash sale under wrk beside sysbench, nginx and redis-benchmark in the
# same run (docs/performance.md); ends "bench-ratios selling= soldout=
# rss_mib=". BENCH_QUICK=1 for a short smoke run. Not part of make test.
bench: services
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory build $(BUILD)/bench/crowd
	@bench/run.sh $(BUILD)

# The crowd phase of make bench alone (bench/crowd.sh, bench/crowd.c): tens
# of thousands of idle keep-alive connections on one instance while 256
# buy; ends "bench-crowd crowd_rss_mib= crowd_hol_p99_ms= crowd_buy_ratio=".
bench-crowd: services
	@$(MAKE) --no-print-directory build $(BUILD)/bench/crowd
	@bench/crowd.sh $(BUILD)

# CPU time and context switches per purchase of one instance under a
# 256-connection crowd; BENCH_PROFILE="label=binary[:ENV=v,...] ..." to
# compare builds in one run (bench/profile.sh).
bench-profile: services
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory build
	@bench/profile.sh $(BENCH_PROFILE)

# 1, 2 and 4 instances behind haproxy, and the costs per purchase that
# docs/scaling.md's shard simulation starts from (bench/scale.sh).
bench-scale: services
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory build
	@bench/scale.sh $(BUILD)

# People and bots buy a queue sale through its waiting room, then an open
# sale, on two instances (bench/fairness.sh, bench/fairness.c; about 5
# minutes); ends "bench-fairness bots_orders_share= ... ratio=" and fails
# when the queue sale gives bots more than 1.2 times their share of the
# accounts, or an invariant breaks. Not part of make test.
bench-fairness: services
	@$(MAKE) --no-print-directory build $(BUILD)/bench/fairness
	@bench/fairness.sh $(BUILD)

# Every buyer of a 20,000-unit sale pays at once (bench/paystorm.sh, also
# make bench's last phase; about a minute); ends "bench-paystorm
# pay_storm=" (payments/s over the sale's purchases/s).
# BENCH_PAYSTORM_BASE=<another seckilld> runs it with that one too.
bench-paystorm: services
	@$(MAKE) --no-print-directory build
	@bench/paystorm.sh $(BUILD)

# The purchase transaction through MariaDB's Spider engine (two backends,
# one front, private servers on BENCH_SPIDER_PORT 13331..13333) beside the
# same transaction on a backend directly (bench/spider.sh, under a
# minute); ends "bench-spider c16: direct= spider= ratio= ...". Needs no
# seckilld and no make services. Not part of make test.
bench-spider:
	@scripts/deps.sh bench spider
	@bench/spider.sh

# The same scenario as a JMeter test plan (bench/jmeter/seckill.jmx).
bench-jmeter: services
	@scripts/deps.sh jmeter
	@$(MAKE) --no-print-directory build
	@bench/jmeter/run.sh $(BUILD)

# ---- fuzzing (tests/fuzz/: libFuzzer harnesses, clang) ----

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := route json token
FUZZ_DIR := build/fuzz
FUZZ_SAN := -fsanitize=fuzzer-no-link,address,undefined \
            -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -I. $(WARN) -g -O1 $(FUZZ_SAN) \
              $(PKG_CFLAGS) -MMD -MP
# The service's request code and its sale layer, without the daemon
# (handlers/http.c: tests/fuzz/driver.c calls handlers/dispatch.c over a
# fake connection) and the expiry thread, and without what lies below the
# sale layer (tests/fuzz/fake_backend.c stands in).
FUZZ_LIB_SRC = $(wildcard common/*.c) \
               $(filter-out handlers/http.c,$(wildcard handlers/*.c)) \
               $(filter-out sale/expiry.c,$(wildcard sale/*.c)) \
               $(WEB_GEN) tests/fuzz/driver.c tests/fuzz/fake_backend.c
FUZZ_LIB_OBJ = $(FUZZ_LIB_SRC:%.c=$(FUZZ_DIR)/obj/%.o)

.PHONY: fuzz fuzz-build fuzz-smoke

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC  $< (fuzz)"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB_OBJ)
	@echo "  LD  $@"
	$(Q)$(FUZZ_CC) -fsanitize=fuzzer,address,undefined -o $@ $^ \
	    $(shell pkg-config --libs jansson libsodium hiredis libcurl) -lpthread

# Kept between runs, though only pattern rules name them.
.SECONDARY: $(FUZZ_LIB_OBJ) \
            $(FUZZ_TARGETS:%=$(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o)

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)

fuzz-build: deps
	@$(MAKE) -s --no-print-directory $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)

# Each harness on a scratch copy of tests/fuzz/corpus/<target>; fails on a
# crash.
fuzz: fuzz-build
	@scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=5

# ---- the settings' documents ----

# The README's configuration table and docs/seckilld.8, written from the
# settings table of cmd/config.c (test_config fails while they differ).
config-docs: build
	@scripts/config-docs.sh $(BUILD)/seckilld

# ---- style ----

FORMAT_SRC = $(shell git ls-files '*.c' '*.h')

format:
	clang-format -i $(FORMAT_SRC)

format-check:
	@clang-format --dry-run -Werror $(FORMAT_SRC) && echo "format ok"

clean:
	rm -rf build

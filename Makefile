# Every target sets up what it needs; a second run skips installs unless inputs changed.

PYTHON ?= python3
# .venv: an editable install, pure Python (make test, make bench).
# .venv-installed: a regular install whose hot modules setup.py compiles with mypyc
# (make serve, make compare, make test-installed).
VENV := .venv
INSTALLED_VENV := .venv-installed
SOURCES := pyproject.toml setup.py README.md $(shell find core plugins spark bench -name '*.py' 2>/dev/null)
SOURCES += $(shell find core/management/ui -type f 2>/dev/null)  # the web UI's files ship too
ARGS ?=

.PHONY: serve install dist test test-installed bench compare lavinmq lint typecheck clean browser rabbitmqadmin nodejs \
	prometheus systemd-analyze etcd

serve: $(INSTALLED_VENV)/.installed-run
	@echo "lavin serve: the lavin command is $(CURDIR)/$(INSTALLED_VENV)/bin/lavin (\`make install\` puts it on PATH)"
	$(INSTALLED_VENV)/bin/lavin serve $(ARGS)

# The `lavin` of `make serve`, put on PATH: prints the line that does it for a shell.
install: $(INSTALLED_VENV)/.installed-run
	@echo "lavin is installed in $(CURDIR)/$(INSTALLED_VENV). To put lavin and lavin-perf on PATH in this shell:"
	@echo "    . $(CURDIR)/$(INSTALLED_VENV)/bin/activate"
	@echo "or in every shell (when ~/.local/bin is on PATH):"
	@echo "    ln -sf $(CURDIR)/$(INSTALLED_VENV)/bin/lavin ~/.local/bin/lavin"

# The sdist and a wheel (compiled with mypyc for this platform) in dist/, built in an isolated
# environment from the sdist, so a file missing from the sdist fails here. README.md, "Install".
dist: $(VENV)/.installed-dev
	rm -rf build dist
	$(VENV)/bin/python -m build --outdir dist .

test: $(VENV)/.installed-test browser rabbitmqadmin nodejs prometheus systemd-analyze etcd
	$(VENV)/bin/python -m pytest -q $(ARGS)

# The suite against a regular (non-editable) install, run from inside that venv so the
# current directory holds no `lavin` and no egg-info: `lavin` can only come from
# site-packages, which catches modules missing from the wheel.
test-installed: $(INSTALLED_VENV)/.installed-test browser rabbitmqadmin nodejs prometheus systemd-analyze etcd
	cd $(INSTALLED_VENV) && LAVIN_TEST_EXPECT_INSTALLED=1 \
		$(CURDIR)/$(INSTALLED_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		-c $(CURDIR)/pyproject.toml --rootdir $(CURDIR) $(CURDIR)/tests $(ARGS)

# System packages some tests drive, from Debian: each installed when its command is missing
# and apt-get is there (as root, or with sudo); else the tests that need it skip and say why.
# $(call debian_package,COMMANDS,PACKAGES,APT OPTIONS,WHAT SKIPS WITHOUT IT)
define debian_package
	@{ $(foreach command,$(1),command -v $(command) &&) true; } >/dev/null || ! command -v apt-get >/dev/null || \
		{ as_root="$$( [ "$$(id -u)" = 0 ] || echo sudo -n )"; \
		  $$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(3) $(2) \
		  || { $$as_root apt-get update -qq && $$as_root env DEBIAN_FRONTEND=noninteractive \
		       apt-get install -y -qq $(3) $(2); }; } >/dev/null || \
		echo "$(2) could not be installed: $(4) will skip"
endef

# The web UI's browser tests drive Debian's chromium (never a downloaded browser).
browser:
	$(call debian_package,chromium,chromium,,the web UI's browser tests)

# tests/test_rabbitmqadmin.py drives RabbitMQ's own rabbitmqadmin, and test_rabbitmq_interop.py
# and test_migration.py a private RabbitMQ node with its shovel and federation plugins: all
# ship in Debian's rabbitmq-server.
rabbitmqadmin:
	$(call debian_package,rabbitmqadmin,rabbitmq-server,--no-install-recommends,the rabbitmqadmin and RabbitMQ interop tests)

# tests/test_websocket.py drives @cloudamqp/amqp-client's AMQPWebSocketClient under Debian's Node
# (the test session installs that npm package into ~/.cache).
nodejs:
	$(call debian_package,node npm,nodejs npm,--no-install-recommends,the Node WebSocket test)

# tests/test_prometheus_scrape.py scrapes a broker with a real Prometheus.
prometheus:
	$(call debian_package,prometheus,prometheus,--no-install-recommends,the Prometheus scrape test)

# tests/test_systemd_unit.py checks contrib/systemd/lavin.service with systemd-analyze.
systemd-analyze:
	$(call debian_package,systemd-analyze,systemd,--no-install-recommends,the systemd unit check)

# The clustering tests (tests/clustering/) elect leaders on a private etcd, Debian's etcd-server.
etcd:
	$(call debian_package,etcd,etcd-server,--no-install-recommends,the clustering tests)

# Micro-benchmarks of the hot paths, bench/test_*.py (`make test` collects only tests/).
bench: $(VENV)/.installed-bench
	$(VENV)/bin/python -m pytest bench -q --benchmark-only --benchmark-sort=name \
		--benchmark-columns=median,iqr,ops,rounds $(ARGS)

# The same lavin-perf scenarios against Lavin and a private RabbitMQ; see docs/benchmarks.md.
compare: $(INSTALLED_VENV)/.installed-run
	bench/compare $(ARGS)

# LavinMQ built from source, to compare against with `make compare ARGS="--peer lavinmq=..."`
# (docs/benchmarks.md). The build script and the git mirrors it builds from live outside the
# repository; LAVINMQ_TAG picks another version.
LAVINMQ_SCRIPT ?= $(abspath ../shared/tools/build-lavinmq.sh)
LAVINMQ_MIRRORS ?= $(abspath ../.mirror)
LAVINMQ_BUILD ?= /tmp/lavinmq-build
lavinmq:
	@test -f $(LAVINMQ_SCRIPT) || { echo "no $(LAVINMQ_SCRIPT): point LAVINMQ_SCRIPT at build-lavinmq.sh" \
		"(see docs/benchmarks.md, \"LavinMQ side by side\")" >&2; exit 2; }
	MIRRORS=$(LAVINMQ_MIRRORS) BUILD=$(LAVINMQ_BUILD) bash $(LAVINMQ_SCRIPT)

# ruff (lint and format) over the whole tree and strict mypy over lavin and lavin.plugins
# ([tool.ruff], [tool.mypy]); every check runs, and lint fails if any of them did. The
# layering contracts are a test (tests/test_layers.py).
lint: $(VENV)/.installed-dev
	@status=0; \
	$(VENV)/bin/ruff check . || status=1; \
	$(VENV)/bin/ruff format --check --output-format concise . || status=1; \
	$(MAKE) --no-print-directory typecheck || status=1; \
	exit $$status

# mypy finds modules by import name: build/typecheck/lavin links to each entry of core/ and to
# plugins/, laid out as in the wheel, and [tool.mypy] points there. Rebuilt on every run, so
# new modules are picked up; errors are reported under build/typecheck/lavin/.
typecheck: $(VENV)/.installed-dev
	rm -rf build/typecheck
	mkdir -p build/typecheck/lavin
	ln -s $(CURDIR)/core/* build/typecheck/lavin/
	ln -s $(CURDIR)/plugins build/typecheck/lavin/plugins
	$(VENV)/bin/mypy

%/bin/python:
	$(PYTHON) -m venv $*

# Editable installs only need redoing when the metadata (deps, entry points) changes.
$(VENV)/.installed-bench: pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e '.[bench]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e '.[dev]'
	touch $@

# A regular install copies (and compiles) the code, so any source change means
# reinstalling. build/ is removed first because setuptools would otherwise put stale
# modules into the wheel.
$(INSTALLED_VENV)/.installed-run: $(SOURCES) | $(INSTALLED_VENV)/bin/python
	@echo "Installing Lavin into $(INSTALLED_VENV), compiling its hot modules with mypyc:" \
		"about 100 s the first time, and again only when the sources change"
	rm -rf build
	$(INSTALLED_VENV)/bin/python -m pip install --quiet .
	touch $@

$(INSTALLED_VENV)/.installed-test: $(SOURCES) | $(INSTALLED_VENV)/bin/python
	@echo "Installing Lavin into $(INSTALLED_VENV), compiling its hot modules with mypyc:" \
		"about 100 s the first time, and again only when the sources change"
	rm -rf build
	$(INSTALLED_VENV)/bin/python -m pip install --quiet '.[test]'
	touch $@ $(INSTALLED_VENV)/.installed-run

clean:
	rm -rf $(VENV) $(INSTALLED_VENV) build dist lavin.egg-info

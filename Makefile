# os-builder. `make test` and `make hypervisor` set up what they need.
SHELL := /bin/bash
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)
# Builds, tests and benchmarks share builder's one default cache
# ($OSB_CACHE_DIR, else $XDG_CACHE_HOME/os-builder, else ~/.cache/os-builder),
# the same one `bin/builder build` uses by hand.

# Debian packages the builds and the tests need.
HOST_PACKAGES := mmdebstrap qemu-system-x86 qemu-utils ovmf squashfs-tools \
	sbsigntool ipxe-qemu zstd cpio docker-registry systemd-boot-efi gdisk \
	mtools xorriso dosfstools binutils systemd ca-certificates git e2fsprogs \
	cryptsetup-bin bcache-tools lvm2 swtpm swtpm-tools libtss2-tcti-swtpm0 \
	libtss2-esys-3.0.2-0 libtss2-rc0 libtss2-mu0 dnsmasq-base iproute2 \
	qemu-user-static binfmt-support arch-test qemu-system-arm qemu-efi-aarch64

.PHONY: setup build builder test bench fuzz hypervisor test-image vet fmt-check clean

setup: ## install host packages (idempotent)
	@missing=$$(for p in $(HOST_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "setup: installing$$(echo ' '$$missing)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -q && apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@# Foreign-architecture builds (arm64 here) run maintainer scripts under
	@# qemu-user: binfmt_misc mounted, qemu's entries enabled. The builder
	@# only checks this (builder/hostarch); it changes no host state.
	@test -e /proc/sys/fs/binfmt_misc/status || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
	@update-binfmts --enable 2>/dev/null || true

build: builder ## alias

# The builder carries its init (cmd/init for every architecture), so the
# binary alone builds images: no Go, no source tree. The inits reach
# cmd/builder's go:embed through -overlay only (see cmd/embedinit, a step
# of this target, not a binary of bin/).
BIN ?= bin
builder: ## build bin/builder (with its init), bin/serverboot, bin/redfish-emulator
	$(GO) run ./cmd/embedinit $(BIN)/.init
	$(GO) build -tags osb_embed_init -overlay $(BIN)/.init/overlay.json -o $(BIN)/ $(filter-out ./cmd/embedinit,$(wildcard ./cmd/*))

# The recipes' outputs, built once (cached) and shared by every test that
# boots a real image. dpservice ships only as an image on a registry this
# machine cannot reach: it is left out visibly, and the manifest says so.
HYPERVISOR_FLAGS ?= --exclude-layer dpservice

# --locked: CI builds exactly what the committed locks pin. The test image
# again, signed with a test key: what the Secure Boot boots enroll and boot
# (only the UKI-bearing artifacts are made anew). The test image for arm64,
# built here under qemu-user (the whole arm64 build: 3 minutes cold on a quiet 2-core machine,
# 179 s in BenchmarkArchitectures; the hypervisor's arm64 base takes 8),
# booted by the builder's TestBootARM64* in qemu-system-aarch64.
test-image: setup builder
	bin/builder build recipes/test.yaml --locked --output out/test
	test -e out/keys/db.crt || bin/builder genkey out/keys
	bin/builder build recipes/test.yaml --locked --output out/test-signed --sign-key out/keys/db.key --sign-cert out/keys/db.crt
	@# The arm64 image (its base emulated: CPU) beside the hypervisor (its
	@# packages: mostly downloads); the cache takes concurrent builds.
	bin/builder build recipes/test-multiarch.yaml --locked --arch arm64 --output out/test-arm64 & arm=$$!; \
	bin/builder build recipes/hypervisor.yaml --arch amd64 $(HYPERVISOR_FLAGS) --locked --output out/hypervisor; hv=$$?; \
	wait $$arm && exit $$hv

# integrations/metal-operator is a module of its own (Kubernetes stays out
# of the main module); sum.golang.org is not asked about ironcore-dev modules.
METAL_OPERATOR := cd integrations/metal-operator && GONOSUMDB=github.com/ironcore-dev

vet:
	$(GO) vet ./...
	$(METAL_OPERATOR) $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

# Not in make test (a cold emulated build and a TCG boot do not fit its
# budget): the arm64 hypervisor, built with
#   bin/builder build recipes/hypervisor.yaml --arch arm64 $(HYPERVISOR_FLAGS) --locked --output out/hypervisor-arm64
# boots disk.raw with OSB_HYPERVISOR_ARM64_OUTPUT=$(CURDIR)/out/hypervisor-arm64
# go test ./builder -run TestHypervisorARM64Disk (docs/hypervisor.md).
test: ## everything CI runs, each phase timed; ends with the table of where the time went (out/timings)
	GO=$(GO) FUZZTIME=$(FUZZTIME) ci/test.sh

# Every fuzz target for FUZZTIME each: generated inputs, not just the seeds.
FUZZTIME ?= 10s
fuzz:
	FUZZTIME=$(FUZZTIME) ci/fuzz.sh

# The anchor bench/ compares against: mkosi 14 and what it runs.
BENCH_PACKAGES := mkosi debootstrap systemd-container

bench: setup builder ## benchmarks (see README)
	@$(MAKE) --no-print-directory setup HOST_PACKAGES="$(BENCH_PACKAGES)"
	OSB_TEST_OUTPUT=$(CURDIR)/out/test $(GO) test -run '^$$' -bench . -benchtime 1x ./...

hypervisor: setup builder ## the main job (amd64; --arch arm64 builds the other)
	bin/builder build recipes/hypervisor.yaml --arch amd64 $(HYPERVISOR_FLAGS)

clean:
	rm -rf bin out

#!/usr/bin/env bash
# Build every non-test recipe and push it to $OS_IMAGES_REGISTRY as
#   $OS_IMAGES_REGISTRY/os-images/<recipe name>:<version>
#   $OS_IMAGES_REGISTRY/os-images/<recipe name>:<version>-<git sha7>
#   $OS_IMAGES_REGISTRY/os-images/<recipe name>:latest      (main branch only)
# (docs/image-format.md, "Tags"). Runs the same locally and in CI, e.g. against
# a local registry:
#   docker-registry serve config.yml &   # http.addr 127.0.0.1:5000
#   OS_IMAGES_REGISTRY=127.0.0.1:5000 ci/publish.sh recipes/hypervisor.yaml
#
# Environment:
#   OS_IMAGES_REGISTRY  registry host and optional path prefix (required)
#   OS_IMAGES_INSECURE  1: plain HTTP (loopback hosts use HTTP anyway)
#   BUILDER             builder command (default: go run ./cmd/builder)
#   OUT_DIR             where outputs go (default: out/publish)
#   BUILD_FLAGS         extra `builder build` flags, e.g. "--exclude-layer dpservice"
#   GIT_SHA, GIT_BRANCH override what git reports (CI sets them)
#   DRY_RUN             1: print the build and push commands, run none
# Arguments: recipe files; default every recipes/*.yaml that is not a test
# recipe (test.yaml, test-*.yaml, *-test.yaml).
# Registry credentials come from the docker config (~/.docker/config.json or
# $DOCKER_CONFIG) and are never printed.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${OS_IMAGES_REGISTRY:?set OS_IMAGES_REGISTRY, e.g. ghcr.io/ironcore-dev or 127.0.0.1:5000}"
registry=${OS_IMAGES_REGISTRY%/}
read -r -a builder <<<"${BUILDER:-go run ./cmd/builder}"
out_dir=${OUT_DIR:-out/publish}
read -r -a build_flags <<<"${BUILD_FLAGS:-}"
sha=${GIT_SHA:-$(git rev-parse HEAD)}
sha=${sha:0:7}
branch=${GIT_BRANCH:-$(git rev-parse --abbrev-ref HEAD)}
push_flags=()
if [[ ${OS_IMAGES_INSECURE:-} == 1 ]]; then push_flags+=(--insecure); fi

run() {
	echo "+ $*" >&2
	if [[ ${DRY_RUN:-} != 1 ]]; then "$@"; fi
}

# top_level KEY FILE: the value of a top-level "KEY: value" line, unquoted.
top_level() {
	sed -n -E "s/^$1:[[:space:]]*[\"']?([^\"'#]*[^\"'#[:space:]])[\"']?[[:space:]]*(#.*)?$/\1/p" "$2" | head -n1
}

# tag_safe VERSION: OCI tags allow [A-Za-z0-9_.-]; anything else becomes "-".
tag_safe() {
	local t
	t=$(printf '%s' "$1" | tr -c 'A-Za-z0-9_.-' '-')
	printf '%s' "${t:0:100}"
}

recipes=("$@")
if [[ ${#recipes[@]} -eq 0 ]]; then
	for f in recipes/*.yaml; do
		case $(basename "$f") in
		test.yaml | test-*.yaml | *-test.yaml) continue ;;
		esac
		recipes+=("$f")
	done
fi
if [[ ${#recipes[@]} -eq 0 ]]; then
	echo "publish: no recipes to publish" >&2
	exit 0
fi

for recipe in "${recipes[@]}"; do
	name=$(top_level name "$recipe")
	version=$(top_level version "$recipe")
	if [[ -z $name || -z $version ]]; then
		echo "publish: $recipe: no top-level name or version" >&2
		exit 1
	fi
	version=$(tag_safe "$version")
	output="$out_dir/$name"
	repo="$registry/os-images/$name"

	run "${builder[@]}" build "$recipe" ${build_flags[@]+"${build_flags[@]}"} --output "$output"
	tags=("$version" "$version-$sha")
	if [[ $branch == main ]]; then tags+=(latest); fi
	# Pushing the same output again only re-tags: every blob is already there.
	for tag in "${tags[@]}"; do
		run "${builder[@]}" push "${push_flags[@]}" "$output" "$repo:$tag"
	done
	echo "publish: $recipe -> $repo:{$(
		IFS=,
		echo "${tags[*]}"
	)}" >&2
done

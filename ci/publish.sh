#!/usr/bin/env bash
# Build every non-test recipe and push it to $OS_IMAGES_REGISTRY as
#   $OS_IMAGES_REGISTRY/os-images/<recipe name>:<version>          (release refs)
#   $OS_IMAGES_REGISTRY/os-images/<recipe name>:<version>-<git sha7> (release refs)
#   $OS_IMAGES_REGISTRY/os-images/<recipe name>:latest             (main only)
#   $OS_IMAGES_REGISTRY/os-images/<recipe name>:<version>-<git sha7>-<ref name>
#                                                (any other ref: this tag only)
# Release refs are refs/heads/main and release tags refs/tags/v*; a tag
# named "main" or a branch named "v1.2" is not one. Each tag names one index:
# per architecture the v1 manifest (what boot-operator resolves) first, then
# the IronCore Image V2 kinds UKI, EFI and Disk; a recipe with
# `imageV2: false` publishes the v1 manifest alone.
# (docs/image-format.md, "Tags"), with an SBOM and SLSA provenance attached as
# OCI referrers (signed with the build's --sign-key, if any), then checks every pushed tag with `builder inspect --verify`
# (the pushed index is the one the output makes, SBOM and provenance attached
# and about it) and lists it in $OUT_DIR/pushed.txt. Runs the same locally and in CI, e.g. against
# a local registry (Debian's docker-registry config listens on :5000):
#   docker-registry serve /etc/docker/registry/config.yml &
#   OS_IMAGES_REGISTRY=127.0.0.1:5000 BUILDER=bin/builder \
#     BUILD_FLAGS="--locked --exclude-layer dpservice" ci/publish.sh recipes/hypervisor.yaml
#
# Environment:
#   OS_IMAGES_REGISTRY  registry host and optional path prefix (required)
#   OS_IMAGES_INSECURE  1: plain HTTP (loopback hosts use HTTP anyway)
#   BUILDER             builder command (default: go run ./cmd/builder)
#   OUT_DIR             where outputs go (default: out/publish)
#   BUILD_FLAGS         extra `builder build` flags, e.g. "--locked" or
#                       "--sign-key db.key --sign-cert db.crt" (without a key
#                       the UKIs are unsigned, and this script says so)
#   GIT_SHA             commit (default: git rev-parse HEAD; CI sets it)
#   GIT_REF             full ref built, e.g. refs/heads/main, refs/tags/v1.2.0
#                       (default: git symbolic-ref HEAD; CI sets github.ref).
#                       A full ref, not a name: a tag "main" is no branch.
#   SOURCE_REPO         provenance: source repository URI (default: git remote origin)
#   BUILDER_ID          provenance: who builds, e.g. the CI run URL
#   DRY_RUN             1: print the build and push commands, run none
#   PUBLISH_ARCH        one architecture's job of the pipeline: build each
#                       recipe built for it with --arch and push it alone as
#                       <version>-<git sha7>-<arch> (no release tag); recipes
#                       not built for it are skipped. Each digest pushed is
#                       listed in $OUT_DIR/staged.txt as <name>/<arch>@sha256:…
#   PUBLISH_JOIN        the last job: the architectures (e.g. "amd64 arm64")
#                       whose images are pulled back by the digests in
#                       PUBLISH_STAGED, checked (builder inspect --verify,
#                       signed by the build's --sign-cert if it has one) and
#                       joined with `builder index` into one index under the
#                       release tags, SBOM and provenance attached
#   PUBLISH_STAGED      with PUBLISH_JOIN: the staged.txt lines of every
#                       architecture's job (space-separated). The join pulls
#                       those digests, never the <version>-<sha7>-<arch>
#                       tags, which anyone who can push could move meanwhile
#   PUBLISH_RECIPES     recipe files (space-separated) when no argument names
#                       any; the workflow sets none (tests set a test recipe)
# Without PUBLISH_ARCH and PUBLISH_JOIN a recipe of several architectures
# (base.architectures) is built on this machine, each architecture into
# $OUT_DIR/<name>/<arch> (a foreign one emulated: slow, but the same image),
# and pushed as one index under the release tags, each architecture also
# alone under <first tag>-<arch> (`builder push`); every tag is verified
# and listed.
# Arguments: recipe files; default $PUBLISH_RECIPES, else every
# recipes/*.yaml that is not a test recipe (test.yaml, test-*.yaml,
# *-test.yaml).
# Registry credentials come from the docker config (~/.docker/config.json or
# $DOCKER_CONFIG) and are never printed.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${OS_IMAGES_REGISTRY:?set OS_IMAGES_REGISTRY, e.g. ghcr.io/ironcore-dev or 127.0.0.1:5000}"
registry=${OS_IMAGES_REGISTRY%/}
read -r -a builder <<<"${BUILDER:-go run ./cmd/builder}"
out_dir=${OUT_DIR:-out/publish}
read -r -a build_flags <<<"${BUILD_FLAGS:-}"
commit=${GIT_SHA:-$(git rev-parse HEAD)}
sha=${commit:0:7}
source_repo=${SOURCE_REPO:-$(git remote get-url origin 2>/dev/null || true)}
if [[ -n ${GIT_BRANCH:-} && -z ${GIT_REF:-} ]]; then
	echo "publish: GIT_BRANCH is no longer read: set GIT_REF=refs/heads/$GIT_BRANCH (a name cannot tell a branch from a tag)" >&2
	exit 1
fi
ref=${GIT_REF:-$(git symbolic-ref -q HEAD || echo detached)}
net_flags=()
if [[ ${OS_IMAGES_INSECURE:-} == 1 ]]; then net_flags+=(--insecure); fi
arch=${PUBLISH_ARCH:-}
read -r -a join <<<"${PUBLISH_JOIN:-}"
if [[ -n $arch && ${#join[@]} -gt 0 ]]; then
	echo "publish: PUBLISH_ARCH and PUBLISH_JOIN exclude each other (one is a job per architecture, the other the job joining them)" >&2
	exit 1
fi
# The build's key and certificate also sign the SBOM and provenance push
# attaches (DSSE envelopes that inspect --verify checks).
signed=0
sign_flags=()
cert_flags=()
for ((i = 0; i < ${#build_flags[@]}; i++)); do
	f=${build_flags[i]}
	case $f in
	--sign-key | --sign-cert)
		sign_flags+=("$f" "${build_flags[i + 1]:-}")
		i=$((i + 1))
		;;
	--sign-key=* | --sign-cert=*) sign_flags+=("$f") ;;
	*) continue ;;
	esac
	if [[ $f == --sign-key* ]]; then signed=1; fi
	if [[ $f == --sign-cert* ]]; then cert_flags=("${sign_flags[@]: -1}"); fi
done
# The certificate the joining job requires each stage signed with.
if [[ ${#cert_flags[@]} -gt 0 ]]; then
	if [[ ${cert_flags[0]} == --sign-cert=* ]]; then
		cert_flags=("${cert_flags[0]}")
	else
		cert_flags=(--sign-cert "${cert_flags[0]}")
	fi
fi
read -r -a staged <<<"${PUBLISH_STAGED:-}"
if [[ ${#join[@]} -gt 0 && ${#staged[@]} -eq 0 ]]; then
	echo "publish: PUBLISH_JOIN needs PUBLISH_STAGED (<name>/<arch>@sha256:… of each architecture's push): the join pulls by digest, never by tag" >&2
	exit 1
fi

run() {
	echo "+ $*" >&2
	if [[ ${DRY_RUN:-} != 1 ]]; then "$@"; fi
}

# top_level KEY FILE: the value of a top-level "KEY: value" line, unquoted.
top_level() {
	sed -n -E "s/^$1:[[:space:]]*[\"']?([^\"'#]*[^\"'#[:space:]])[\"']?[[:space:]]*(#.*)?$/\1/p" "$2" | head -n1
}

# tag_safe VERSION [MAX]: OCI tags allow [A-Za-z0-9_.-]; anything else
# becomes "-"; cut to MAX (default 100) characters.
tag_safe() {
	local t
	t=$(printf '%s' "$1" | tr -c 'A-Za-z0-9_.-' '-')
	printf '%s' "${t:0:${2:-100}}"
}

# release_tags VERSION: the tags this ref may push. Only main and release
# tags move <version> (and main latest); any other ref gets one tag that
# names it, so a branch can never overwrite a release.
release_tags() {
	case $ref in
	refs/heads/main) echo "$1" "$1-$sha" latest ;;
	refs/tags/v[0-9]*) echo "$1" "$1-$sha" ;;
	*)
		local name=${ref#refs/heads/}
		name=${name#refs/tags/}
		name=${name#refs/}
		# OCI tags are at most 128 characters.
		tag_safe "$1-$sha-$name" 128
		echo
		;;
	esac
}

# stage_tag VERSION ARCH: the tag one architecture's job pushes (for
# people: the joining job reads staged_digest).
stage_tag() {
	tag_safe "$1-$sha-$2" 128
}

# staged_digest NAME ARCH: the digest PUBLISH_STAGED gives for NAME/ARCH.
staged_digest() {
	local s found=
	for s in "${staged[@]}"; do
		if [[ ! $s =~ ^[a-z0-9._-]+/[a-z0-9]+@sha256:[0-9a-f]{64}$ ]]; then
			echo "publish: PUBLISH_STAGED: \"$s\" is not <name>/<arch>@sha256:<64 hex>" >&2
			exit 1
		fi
		if [[ ${s%@*} == "$1/$2" ]]; then
			if [[ -n $found && $found != "${s#*@}" ]]; then
				echo "publish: PUBLISH_STAGED names two digests for $1/$2" >&2
				exit 1
			fi
			found=${s#*@}
		fi
	done
	if [[ -z $found ]]; then
		echo "publish: PUBLISH_STAGED has no digest for $1/$2: did its job push it?" >&2
		exit 1
	fi
	echo "$found"
}

# builds_for RECIPE ARCH: whether the recipe is built for ARCH (its
# base.architectures, else base.architecture, as the builder renders them).
builds_for() {
	local rendered base
	if ! rendered=$("${builder[@]}" render --json "$1"); then
		echo "publish: $1: builder render failed" >&2
		exit 1
	fi
	base=$(printf '%s' "$rendered" | tr -d ' \t\n' | grep -o '"base":{[^}]*}')
	if [[ $base == *'"architectures":['* ]]; then
		[[ $base =~ \"architectures\":\[[^]]*\"$2\" ]]
	else
		[[ $base == *"\"architecture\":\"$2\""* ]]
	fi
}

recipes=("$@")
if [[ ${#recipes[@]} -eq 0 ]]; then
	read -r -a recipes <<<"${PUBLISH_RECIPES:-}"
fi
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
mkdir -p "$out_dir"
pushed_list="$out_dir/pushed.txt"
: >"$pushed_list"
staged_list="$out_dir/staged.txt"
if [[ -n $arch ]]; then : >"$staged_list"; fi

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

	if [[ $signed == 0 ]]; then
		echo "publish: $recipe: UKIs are unsigned (no --sign-key in BUILD_FLAGS)" >&2
	fi
	dirs=("$output")
	if [[ ${#join[@]} -gt 0 ]]; then
		dirs=()
		for a in "${join[@]}"; do
			builds_for "$recipe" "$a" || continue
			stage="$repo@$(staged_digest "$name" "$a")"
			rm -rf "$output-$a"
			run "${builder[@]}" pull ${net_flags[@]+"${net_flags[@]}"} --arch "$a" "$stage" "$output-$a"
			# The key signs nothing it has not checked: the stage's SBOM
			# and provenance attached and signed with the build's
			# certificate, the image the one its job pushed.
			run "${builder[@]}" inspect ${net_flags[@]+"${net_flags[@]}"} --verify "$output-$a" ${cert_flags[@]+"${cert_flags[@]}"} "$stage" >/dev/null
			dirs+=("$output-$a")
		done
		if [[ ${#dirs[@]} -eq 0 ]]; then
			echo "publish: $recipe is built for none of: ${join[*]}" >&2
			exit 1
		fi
	elif [[ -n $arch ]]; then
		if ! builds_for "$recipe" "$arch"; then
			echo "publish: $recipe: not built for $arch, skipped" >&2
			continue
		fi
		run "${builder[@]}" build "$recipe" ${build_flags[@]+"${build_flags[@]}"} --arch "$arch" --output "$output"
	else
		run "${builder[@]}" build "$recipe" ${build_flags[@]+"${build_flags[@]}"} --output "$output"
	fi
	if [[ -n $arch ]]; then
		tags=("$(stage_tag "$version" "$arch")")
	else
		read -r -a tags <<<"$(release_tags "$version")"
	fi
	# One push: the index, every tag on it, then the SBOM and provenance
	# attached to its digest.
	provenance=(--recipe "$recipe" --source-commit "$commit")
	lock=${recipe%.yaml}.lock
	if [[ -f $lock ]]; then provenance+=(--lock "$lock"); fi
	if [[ -n $source_repo ]]; then provenance+=(--source-repo "$source_repo"); fi
	if [[ -n ${BUILDER_ID:-} ]]; then provenance+=(--builder-id "$BUILDER_ID"); fi
	extra=()
	for tag in "${tags[@]:1}"; do extra+=(--tag "$tag"); done
	if [[ ${#join[@]} -gt 0 ]]; then
		run "${builder[@]}" index ${net_flags[@]+"${net_flags[@]}"} ${sign_flags[@]+"${sign_flags[@]}"} "${provenance[@]}" ${extra[@]+"${extra[@]}"} "${dirs[@]}" "$repo:${tags[0]}"
	else
		digest=$(run "${builder[@]}" push ${net_flags[@]+"${net_flags[@]}"} ${sign_flags[@]+"${sign_flags[@]}"} "${provenance[@]}" ${extra[@]+"${extra[@]}"} "$output" "$repo:${tags[0]}")
		if [[ -n $arch && ${DRY_RUN:-} != 1 ]]; then
			if [[ ! $digest =~ ^sha256:[0-9a-f]{64}$ ]]; then
				echo "publish: $recipe: builder push printed \"$digest\", not a digest" >&2
				exit 1
			fi
			echo "$name/$arch@$digest" >>"$staged_list"
		fi
	fi
	verify=$(
		IFS=,
		echo "${dirs[*]}"
	)
	# Every tag must now name exactly this output, SBOM and provenance
	# attached: no tag is trusted to be right because the push said so.
	checks=()
	for tag in "${tags[@]}"; do checks+=("$verify" "$tag"); done
	# An output of several architectures built here: push also put each
	# architecture alone under <first tag>-<arch>.
	if [[ ${#join[@]} -eq 0 && -z $arch && ! -e $output/manifest.json ]]; then
		for m in "$output"/*/manifest.json; do
			[[ -e $m ]] || continue
			a=$(basename "$(dirname "$m")")
			checks+=("$output/$a" "${tags[0]}-$a")
			tags+=("${tags[0]}-$a")
		done
	fi
	for ((i = 0; i < ${#checks[@]}; i += 2)); do
		run "${builder[@]}" inspect ${net_flags[@]+"${net_flags[@]}"} --verify "${checks[i]}" "$repo:${checks[i + 1]}" >/dev/null
		echo "$repo:${checks[i + 1]}" >>"$pushed_list"
	done
	echo "publish: $recipe -> $repo:{$(
		IFS=,
		echo "${tags[*]}"
	)}" >&2
done

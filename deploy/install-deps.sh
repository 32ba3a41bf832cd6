#!/bin/sh
# Installs every Debian 12 package coil needs to build, test and demo.
# Used by `make deps` (and so by `make demo`, `make test`, .ci/run) and by the Dockerfile.
# Does nothing when everything is already present.
set -eu

PKGS="build-essential pkg-config
libjansson-dev libmicrohttpd-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev
libdnnl-dev libcmocka-dev libseccomp-dev
python3 python3-torch python3-torchvision python3-torchaudio python3-numpy python3-sklearn libopenblas0-pthread
curl wrk nginx-light"
# `install-deps.sh fuzz` (make fuzz): clang and its libFuzzer runtime.
[ "${1:-}" = fuzz ] && PKGS="clang libclang-rt-14-dev"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null

#!/usr/bin/env bash
# Builds every example image source under examples/images/<name>/ as a static binary and packs it
# with `bin/flotilla image pack` into bin/images/<name>.tar as flotilla.local/<name>:latest
# (and hello once more as flotilla.local/hello:v2, answering "version v2").
# Import them with `flotilla image import bin/images/*.tar --data-dir DIR` or drop them into
# <data-dir>/images/. Set VERSION to stamp the apps' default version (main.version).
set -euo pipefail
cd "$(dirname "$0")/.."

FLOTILLA=${FLOTILLA_BIN:-bin/flotilla}
if [[ ! -x "$FLOTILLA" ]]; then
	echo "pack-images: $FLOTILLA not found: run 'make build' first (or set FLOTILLA_BIN)" >&2
	exit 1
fi
mkdir -p bin/images bin/image-bin
ldflags="-s -w"
if [[ -n "${VERSION:-}" ]]; then
	ldflags+=" -X main.version=${VERSION}"
fi
for dir in examples/images/*/; do
	name=$(basename "$dir")
	CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "bin/image-bin/$name" "./$dir"
	"$FLOTILLA" image pack --binary "bin/image-bin/$name" --name "flotilla.local/$name:latest" \
		--entrypoint /app -o "bin/images/$name.tar"
done

# A second version of hello, for the "push an image change" story: same app, default version v2.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=v2" -o bin/image-bin/hello-v2 ./examples/images/hello
"$FLOTILLA" image pack --binary bin/image-bin/hello-v2 --name flotilla.local/hello:v2 \
	--entrypoint /app -o bin/images/hello-v2.tar

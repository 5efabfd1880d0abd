#!/usr/bin/env bash
# Build RocketMQ 4.9's own classes from source, have a Wharf broker write a store, read that store with
# RocketMQ's classes, and compare what they read with what Wharf's HTTP API answers. See README.md.
#
#   run.sh ROCKETMQ_SRC DLEDGER_SRC
#
# ROCKETMQ_SRC: a source tree of RocketMQ 4.9.x (e.g. `git archive rocketmq-all-4.9.8`).
# DLEDGER_SRC:  a source tree of DLedger 0.3.1.2 (openmessaging/dledger, tag dledger-all-0.3.1.2), the
#               version RocketMQ 4.9.8's pom names: DefaultMessageStore refers to DLedgerCommitLog.
# Environment: INTEROP_WORK (default /tmp/interop/run), KEEP_STORE=1 to keep the stores afterwards.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
main=$(cd "$here/../.." && pwd)
rocketmq=$(cd "${1:?usage: run.sh ROCKETMQ_SRC DLEDGER_SRC}" && pwd)
dledger=$(cd "${2:?usage: run.sh ROCKETMQ_SRC DLEDGER_SRC}" && pwd)
work=${INTEROP_WORK:-/tmp/interop/run}
python=$main/.venv/bin/python

# Third-party jars, from Debian: apt-get install -y libcommons-lang3-java libcommons-validator-java
# libgoogle-gson-java libjna-java libnetty-java libslf4j-java liblz4-java libzstd-jni-java
cp=""
for jar in commons-lang3 commons-validator gson jna netty-buffer netty-common netty-transport netty-handler \
    netty-codec netty-resolver netty-transport-native-epoll netty-transport-native-unix-common slf4j-api \
    lz4-java zstd-jni; do
    [ -f "/usr/share/java/$jar.jar" ] || { echo "missing /usr/share/java/$jar.jar (see the apt-get line in run.sh)" >&2; exit 2; }
    cp="$cp/usr/share/java/$jar.jar:"
done
java_opts=(--add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens java.base/jdk.internal.ref=ALL-UNNAMED --add-exports java.base/sun.nio.ch=ALL-UNNAMED
    -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$work/classes:${cp}/usr/share/java/slf4j-simple.jar")

version=$(sed -n 's|^    <version>\(.*\)</version>|\1|p' "$rocketmq/pom.xml" | head -1)
echo "== build: RocketMQ $version ($rocketmq), DLedger $(sed -n 's|^    <version>\(.*\)</version>|\1|p' "$dledger/pom.xml" | head -1)"
rm -rf "$work" && mkdir -p "$work/classes"
# -sourcepath: javac compiles only the RocketMQ classes the check reaches (about 340), unchanged.
javac -nowarn -Xlint:none -encoding UTF-8 --add-exports java.base/sun.nio.ch=ALL-UNNAMED -d "$work/classes" -cp "$cp" \
    -sourcepath "$rocketmq/common/src/main/java:$rocketmq/remoting/src/main/java:$rocketmq/logging/src/main/java:$rocketmq/store/src/main/java:$dledger/dledger/src/main/java:$here/stubs" \
    "$here/java/Check.java" "$here/java/Encode.java" 2>&1 | { grep -E 'error|Error' || true; }
echo "   $(find "$work/classes" -name '*.class' | wc -l) classes"

# One scenario: a broker with the given WHARF_* settings writes a store, RocketMQ's classes read it
# (Check.java), compare.py holds that against the API's answers. Index geometry is passed to Check.
scenario() {
    local name=$1 slots=$2 entries=$3; shift 3
    local dir=$work/$name
    mkdir -p "$dir"
    echo "== [$name] store: a Wharf broker ($*), messages produced and read back over HTTP"
    local port
    port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    env "$@" WHARF_MAX_HASH_SLOTS=$slots WHARF_MAX_INDEX_COUNT=$entries WHARF_STORE_DIR="$dir/store" \
        WHARF_PORT=$port "$main/.venv/bin/wharf" serve >"$dir/wharf.log" 2>&1 &
    broker=$!
    trap 'kill -TERM $broker 2>/dev/null || true' EXIT
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
        sleep 0.2
    done
    "$python" "$here/make_store.py" "http://127.0.0.1:$port" "$dir/api"
    kill -TERM $broker && wait $broker || true
    trap - EXIT
    grep -q 'shutdown: complete' "$dir/wharf.log" || { echo "the broker did not stop cleanly" >&2; tail "$dir/wharf.log" >&2; exit 1; }

    echo "== [$name] check: RocketMQ's classes read the store (a copy: DefaultMessageStore's recovery may change files)"
    cp -a --sparse=always "$dir/store" "$dir/store-copy"
    java "${java_opts[@]}" -Dinterop.maxHashSlotNum=$slots -Dinterop.maxIndexNum=$entries \
        Check "$dir/store-copy" "$dir/api/records" "$dir/check.jsonl" 2>"$dir/rocketmq.log"
    echo "   RocketMQ's own log (warnings and errors), $dir/rocketmq.log:"
    sed 's/^/   | /' "$dir/rocketmq.log"

    echo "== [$name] compare: RocketMQ's reading against Wharf's API answers"
    "$python" "$here/compare.py" "$dir/check.jsonl" "$dir/api" || status=1
    [ "${KEEP_STORE:-}" = 1 ] || rm -rf "$dir/store" "$dir/store-copy"
}

status=0
# RocketMQ's default sizes: 1 GiB CommitLog segments (sparse), 300,000-entry ConsumeQueue files.
scenario default 5000000 20000000
# Small sizes, so that segments roll over (blank records), queues span files and index files fill up.
scenario small 64 40 WHARF_COMMITLOG_FILE_SIZE=106496 WHARF_CONSUMEQUEUE_FILE_ENTRIES=4

echo "== encode: records written by RocketMQ's MessageDecoder.encode"
java "${java_opts[@]}" Encode "$work/rocketmq-records.bin" "$work/rocketmq-records.json"
if cmp -s "$work/rocketmq-records.bin" "$here/rocketmq-records.bin" && cmp -s "$work/rocketmq-records.json" "$here/rocketmq-records.json"; then
    echo "   rocketmq-records.bin and .json are up to date"
else
    echo "   rocketmq-records.bin/.json differ from the ones here: copy them from $work if that is intended"
fi
"$python" "$here/wharf_reads.py" "$here/rocketmq-records.bin" "$here/rocketmq-records.json" || status=1

exit $status

# lib.sh - the setup the train e2e scripts share; source it once $work is set: a fresh
# work directory, $out, the fail/ok/show helpers, and e2e_end for the verdict (the
# script's exit status).
rm -rf "$work"
mkdir -p "$work"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
show() { sed 's/^/  | /' "$@"; }
out=$work/out.txt
e2e_end() {
    echo "$fails failed"
    [ "$fails" -eq 0 ]
}

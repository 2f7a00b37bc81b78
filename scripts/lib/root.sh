# scripts/lib/root.sh: a bare Debian 12 root to run something in as a machine without
# this one's packages would, shared by scripts/fresh-check (the README's first command)
# and scripts/kit-check (the GPU kit). Sourced, not run; the caller sets `me` (its name
# for messages) and calls root_begin first.
#
# The root is made by debootstrap --variant=minbase (plus the packages asked for) and kept
# as a tarball between runs (STOKE_FRESH_CACHE, default ~/.cache/stoke), whose name
# carries what made it; it is unpacked anew each run, so nothing a run installs is
# reused. /proc, /sys and /dev are mounted in a private mount namespace (unshare), so
# they go away with the last process in it however the run ends, and the root is only
# removed once nothing is mounted under it. Needs root (or sudo), debootstrap and unshare
# (installed if missing) and Debian's mirror (STOKE_FRESH_MIRROR).

root_suite=bookworm
root_mirror=${STOKE_FRESH_MIRROR:-http://deb.debian.org/debian}

# root_begin "$@": re-runs the caller under sudo when not root, installs the tools, and
# makes $work (a fresh folder, removed at exit) with $root inside it.
root_begin() {
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "$me: needs root (chroot, mounts) and there is no sudo" >&2; exit 1; }
        exec sudo -E "$0" "$@"
    fi
    for tool in debootstrap unshare; do
        if ! command -v $tool >/dev/null; then
            echo "$me: installing debootstrap" >&2
            apt-get update -q >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
            break
        fi
    done
    work=$(mktemp -d "${TMPDIR:-/var/tmp}/stoke-root.XXXXXX")
    root=$work/root
    mkdir -p "$root"
    trap root_cleanup EXIT
    trap 'root_stop 130' INT
    trap 'root_stop 143' TERM
    trap 'root_stop 129' HUP
}

root_cleanup() {
    # Never delete through a mount: /dev bound into the root would take the host's
    # device nodes with it. The private namespace should have dropped them all.
    if grep -q " $work/" /proc/self/mounts; then
        echo "$me: something is still mounted under $work; left in place" >&2
        return
    fi
    rm -rf --one-file-system "$work"
}

# A signal stops the run inside the root first (timeout passes it to its process
# group), so nothing keeps running in a root that is about to be removed.
root_stop() {
    pid=$(cat "$work/pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then
        n=0
        while kill -0 "$pid" 2>/dev/null && [ $n -lt 60 ]; do sleep 0.5; n=$((n + 1)); done
    fi
    exit "$1"
}

# root_make REFRESH [PACKAGE,...]: fills $root from the cached tarball, or from
# debootstrap (then caches it) when REFRESH is true, there is none, or it is unreadable.
root_make() {
    refresh=$1 include=${2:-}
    cache_dir=${STOKE_FRESH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stoke}
    dbver=$(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo unknown)
    extra=""
    [ -n "$include" ] && extra=-$(echo "$include" | tr ',' '+')
    cache=$cache_dir/fresh-root-$root_suite-minbase$extra-debootstrap$dbver.tar.gz
    mkdir -p "$cache_dir"
    if ! $refresh && [ -s "$cache" ]; then
        echo "== $me: the bare $root_suite root from $cache"
        if ! tar -C "$root" -xzf "$cache"; then
            echo "$me: $cache is unreadable; making the root again" >&2
            rm -rf --one-file-system "$root" && mkdir -p "$root"
            refresh=true
        fi
    else
        refresh=true
    fi
    if $refresh; then
        echo "== $me: debootstrap --variant=minbase${include:+ --include=$include} $root_suite ($root_mirror)"
        debootstrap --variant=minbase ${include:+--include=$include} "$root_suite" "$root" "$root_mirror" \
            >"$work/debootstrap.log" 2>&1 \
            || { tail -20 "$work/debootstrap.log"; echo "$me: debootstrap failed" >&2; exit 1; }
        rm -f "$root"/var/cache/apt/archives/*.deb
        tar -C "$root" -czf "$cache.tmp" . && mv "$cache.tmp" "$cache"
    fi
    cp /etc/resolv.conf "$root/etc/resolv.conf"
}

# root_copy_tree SRC DEST: the clone's files (tracked and untracked, not ignored: no
# out/, no .venv/) into $root/DEST.
root_copy_tree() {
    mkdir -p "$root/$2"
    if [ -e "$1/.git" ] && command -v git >/dev/null; then
        git -C "$1" ls-files -z --cached --others --exclude-standard \
            | (cd "$1" && xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) \
            | tar -C "$1" --null -T - -cf - | tar -C "$root/$2" -xf -
    else
        tar -C "$1" --exclude=./out --exclude=./.venv --exclude=./build -cf - . | tar -C "$root/$2" -xf -
    fi
}

# root_run LIMIT LOG COMMAND [ENV=VALUE...]: runs the shell COMMAND in the root with a
# clean environment (a new login's, plus the ENV given), at most LIMIT seconds, its
# output shown and kept in LOG; sets $rc.
root_run() {
    limit=$1 log=$2 cmd=$3
    shift 3
    # In the background and waited for: a trapped signal interrupts `wait` at once
    # (a foreground pipeline would hold the trap until the run ended by itself).
    {
        rc=0
        timeout --kill-after=30 "$limit" unshare --mount --propagation private sh -c '
            set -e
            r=$1 c=$2
            shift 2
            mount -t proc proc "$r/proc"
            mount -t sysfs sysfs "$r/sys"
            mount --rbind /dev "$r/dev"
            exec chroot "$r" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
                PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@" \
                sh -c "$c"' sh "$root" "$cmd" "$@" </dev/null &
        echo $! >"$work/pid"
        wait $! || rc=$?
        echo $rc >"$work/rc"
    } 2>&1 | tee "$log" &
    wait $! || true
    rc=$(cat "$work/rc" 2>/dev/null || echo 1)
}

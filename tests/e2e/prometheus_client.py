"""prometheus_client.py - the e2e test's helpers for --prometheus (tests/e2e/prometheus.sh):
a free loopback port, a query of Prometheus's API, and hostile clients.

  free-port                       print a loopback port nobody listens on now
  query URL NAME                  exit 0 when Prometheus's /api/v1/query returns NAME
  hostile PORT LOG PIDFILE WHAT   attack the endpoint at PORT while the stoke serving it
                                  (its pid in PIDFILE) must go on writing the records of
                                  its JSON-lines LOG: WHAT is "step" (stoke train's step
                                  records) or "sample" (stoke monitor --jsonl's lines)
  hold PORT PORTFILE              listen on PORT (0: any) and write the port bound, until killed

No timing thresholds: the waits are bounded by attempts so that a hung stoke fails the
test (ctest's TIMEOUT bounds the whole) rather than blocking it forever.
"""
import json
import os
import resource
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    print(port)


def query(url, name):
    q = url + "/api/v1/query?" + urllib.parse.urlencode({"query": name})
    with urllib.request.urlopen(q, timeout=10) as r:
        doc = json.load(r)
    res = doc.get("data", {}).get("result", [])
    if doc.get("status") == "success" and any(x["metric"].get("__name__") == name for x in res):
        print(json.dumps(res[0]))
        return 0
    return 1


def hold(port, portfile):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(port)))
    s.listen(8)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(s.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    while True:
        time.sleep(60)


MARK = {"step": '"type":"step"', "sample": '{"seq":'}


def records(log, what):
    n = 0
    with open(log) as f:
        for line in f:
            if MARK[what] in line:
                n += 1
    return n


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def exchange(port, data, read=True):
    """Sends data on a new connection; returns what came back (b"" if closed)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        c.sendall(data)
        out = b""
        while read:
            try:
                b = c.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            out += b
        return out
    except (BrokenPipeError, ConnectionResetError):
        return b""
    finally:
        c.close()


def status(resp):
    line = resp.split(b"\r\n", 1)[0]
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def scrape(port):
    return exchange(port, b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")


def hostile(port, log, pidfile, what):
    port = int(port)
    pid = int(open(pidfile).read())
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    fails = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            fails.append(what)

    # Requests that are wrong one at a time.
    r = exchange(port, b"DELETE /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    check(status(r) == 405 and b"Allow: GET, HEAD" in r, "DELETE: 405 with Allow")
    r = exchange(port, b"BREW /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    check(status(r) in (400, 405, 501), "an unknown method refused (%s)" % status(r))
    r = exchange(port, b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
    check(status(r) == 405, "POST: 405")
    r = exchange(port, b"GET /../../etc/passwd HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    check(status(r) == 404, "a bad path: 404")
    r = exchange(port, b"GET /metricsX HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    check(status(r) == 404, "/metricsX: 404")
    r = exchange(port, b"\x00\xff\x16\x03\x01 garbage\r\n\r\n")
    check(status(r) != 200, "a garbage request line is not served (%s)" % status(r))
    r = exchange(port, b"GET /metrics HTTP/1.1\r\nHost: t\r\nX-Huge: " + b"a" * (1 << 20) + b"\r\n\r\n")
    check(status(r) != 200, "1 MB of headers refused (%s)" % status(r))
    r = exchange(port, b"GET /metrics HTTP/1.1\r\nHost: t\r\n" + b"X-Many: b\r\n" * 20000 + b"\r\n")
    check(status(r) != 200, "20000 headers refused (%s)" % status(r))

    # Then everything at once, held while the run must keep stepping: 1,000 idle
    # connections, and slowloris clients trickling their headers a byte at a time.
    held = []
    for _ in range(1000):
        try:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
        except OSError as e:
            check(False, "opening the 1,000 connections: %s" % e)
            break
    stop = threading.Event()

    def slowloris():
        while not stop.is_set():
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=5)
                c.sendall(b"GET /metrics HTTP/1.1\r\n")
                while not stop.is_set():
                    c.sendall(b"X")
                    stop.wait(0.5)
            except OSError:
                stop.wait(0.2)  # closed by stoke's timeout: come back, as an attacker does

    threads = [threading.Thread(target=slowloris, daemon=True) for _ in range(20)]
    for t in threads:
        t.start()
    before = records(log, what)
    grew = False
    while alive(pid):  # no clock: the suite's timeout bounds a stall
        if records(log, what) > before + 5:
            grew = True
            break
        time.sleep(0.1)
    check(grew, "stoke went on under attack (%d -> %d %ss)" % (before, records(log, what), what))
    check(alive(pid), "stoke is alive under attack")
    stop.set()
    for s in held:
        s.close()
    for t in threads:
        t.join()

    # Afterwards a normal scrape answers (once the attack's connections are gone).
    ok = False
    while alive(pid):
        try:
            r = scrape(port)
            if status(r) == 200 and b"\nstoke_info{" in r:
                ok = True
                break
        except OSError:
            pass
        time.sleep(0.1)
    check(ok, "a normal scrape answers after the attack")
    check(alive(pid), "stoke is alive after the attack")
    return 1 if fails else 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "free-port":
        free_port()
    elif cmd == "query":
        sys.exit(query(sys.argv[2], sys.argv[3]))
    elif cmd == "hold":
        hold(sys.argv[2], sys.argv[3])
    elif cmd == "hostile":
        sys.exit(hostile(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]))
    else:
        sys.exit("unknown command " + cmd)

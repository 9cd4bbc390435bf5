"""Measures for Benchmarks/network.sh: see there. argv: binary, scratch folder, rounds."""
import http.server, os, socketserver, statistics, subprocess, sys, threading, time

binary, root, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
BULK = 256 << 20
blob = b"x" * (1 << 20)

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        size = BULK if self.path == "/bulk" else 2
        self.send_response(200); self.send_header("Content-Length", str(size)); self.end_headers()
        if size == 2: self.wfile.write(b"ok"); return
        for _ in range(size >> 20): self.wfile.write(blob)
    def log_message(self, *args): pass

server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
port = server.server_address[1]
threading.Thread(target=server.serve_forever, daemon=True).start()
# The floor under any relay (relay-floor.py), a process of its own as the launcher is.
floor = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "relay-floor.py"), str(port)],
                         stdout=subprocess.PIPE, text=True)
floor_port = int(floor.stdout.readline())

REQUESTS = 200
client = f"""
import socket, time, sys
def get(path, proxy):
    s = socket.create_connection(("127.0.0.1", 3128) if proxy else ("127.0.0.1", {port}))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    target = "http://bench.test:{port}" + path if proxy else path
    s.sendall(f"GET {{target}} HTTP/1.1\\r\\nHost: bench.test\\r\\nConnection: close\\r\\n\\r\\n".encode())
    n = 0
    while True:
        chunk = s.recv(1 << 20)
        if not chunk: break
        n += len(chunk)
    s.close(); return n
proxy = sys.argv[1] == "proxy"
start = time.perf_counter()
for _ in range({REQUESTS} if sys.argv[1] != "floor" else 0): get("/small", proxy)
small = (time.perf_counter() - start) / {REQUESTS}
if sys.argv[1] == "floor":
    s = socket.create_connection(("127.0.0.1", {floor_port}))
elif proxy:
    # bulk through a CONNECT tunnel
    s = socket.create_connection(("127.0.0.1", 3128)); s.sendall(b"CONNECT bench.test:{port} HTTP/1.1\\r\\n\\r\\n"); s.recv(4096)
else:
    s = socket.create_connection(("127.0.0.1", {port}))
start = time.perf_counter()
s.sendall(b"GET /bulk HTTP/1.1\\r\\nHost: bench.test\\r\\nConnection: close\\r\\n\\r\\n")
n = 0
while True:
    chunk = s.recv(1 << 20)
    if not chunk: break
    n += len(chunk)
bulk = n / (time.perf_counter() - start)
print(small, bulk)
"""

def sandbox(options, command):
    return subprocess.run([binary, "run", "--app", "com.example.bench"] + options + ["--"] + command,
                          capture_output=True, text=True, check=True).stdout

def timed(options):
    start = time.perf_counter(); sandbox(options, ["/bin/true"]); return time.perf_counter() - start

proxied = ["--allow-host", f"bench.test:{port}", "--resolve", "bench.test:127.0.0.1"]
launch_plain, launch_hosts, small_proxy, small_direct, bulk_proxy, bulk_direct, bulk_floor = [], [], [], [], [], [], []
for _ in range(3): timed([]); timed(proxied)  # warm
for _ in range(rounds):
    launch_plain.append(timed([]))
    launch_hosts.append(timed(proxied))
    a, b = map(float, sandbox(proxied, ["/usr/bin/python3", "-c", client, "proxy"]).split())
    small_proxy.append(a); bulk_proxy.append(b)
    a, b = map(float, sandbox(["--policy", "networked"], ["/usr/bin/python3", "-c", client, "direct"]).split())
    small_direct.append(a); bulk_direct.append(b)
    bulk_floor.append(float(sandbox(["--policy", "networked"], ["/usr/bin/python3", "-c", client, "floor"]).split()[1]))
floor.kill()

m = statistics.median
print(f"rounds {rounds}; loopback server; {REQUESTS} requests a round; bulk {BULK >> 20} MiB")
print(f"launch /bin/true: no network {m(launch_plain)*1e3:.2f} ms, allowed-hosts list {m(launch_hosts)*1e3:.2f} ms, "
      f"ratio {m(launch_hosts)/m(launch_plain):.3f} (target <= 1.1: {'met' if m(launch_hosts)/m(launch_plain) <= 1.1 else 'missed'})")
added = (m(small_proxy) - m(small_direct)) * 1e3
print(f"small request: direct {m(small_direct)*1e3:.3f} ms, through the proxy {m(small_proxy)*1e3:.3f} ms, "
      f"added {added:.3f} ms (target <= 1 ms: {'met' if added <= 1 else 'missed'})")
ratio = m(bulk_proxy) / m(bulk_direct)
print(f"bulk: direct {m(bulk_direct)/1e6:.0f} MB/s, through a tunnel {m(bulk_proxy)/1e6:.0f} MB/s, "
      f"ratio {ratio:.3f} (target >= 0.9: {'met' if ratio >= 0.9 else 'missed'})")
floor_ratio = m(bulk_floor) / m(bulk_direct)
print(f"bulk through the floor relay (relay-floor.py: splice, no checks): {m(bulk_floor)/1e6:.0f} MB/s, "
      f"ratio {floor_ratio:.3f} to direct; the launcher's tunnel reaches {m(bulk_proxy)/m(bulk_floor):.3f} of it")

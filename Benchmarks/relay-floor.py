"""The floor under any relay, for Benchmarks/network.py: a minimal relay that
joins each connection to 127.0.0.1:PORT with splice(2) through a pipe (no
byte copied through user space), one thread a direction, no checks. What it
reaches is as fast as a proxy hop can be on this machine; the launcher's
relay is measured against it and against no relay at all.
argv: the upstream port. Prints the port it listens on."""
import fcntl, os, socket, sys, threading

F_SETPIPE_SZ = 1031
upstream_port = int(sys.argv[1])

def pump(source, sink):
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 1 << 20)
    try:
        while moved := os.splice(source.fileno(), write_end, 1 << 20, flags=os.SPLICE_F_MOVE):
            while moved:
                moved -= os.splice(read_end, sink.fileno(), moved, flags=os.SPLICE_F_MOVE)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    os.close(read_end)
    os.close(write_end)

listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
while True:
    client, _ = listener.accept()
    upstream = socket.create_connection(("127.0.0.1", upstream_port))
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()

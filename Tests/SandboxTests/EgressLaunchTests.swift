import Foundation
import Testing
import Glibc
@testable import Sandbox

/// A library user's launches with an allowed-hosts list: each is served by
/// the process's one proxy thread, which outlives every launch, and a
/// launch's proxy ends with it, a launch that fails after its proxy was
/// served included.
@Suite(.serialized) struct EgressLaunchTests {
    /// The host "bench.test" is 127.0.0.1 here, where `server` listens.
    static func policy(port: UInt16) throws -> Policy {
        var policy = Policy.defaultPolicy
        policy.allowedHosts = [try AllowedHost(parsing: "bench.test:\(port)")]
        return policy
    }

    static func request(_ request: inout LaunchRequest) {
        request.view = .private
        request.egressResolver = .fixed(["bench.test": [IPAddress("127.0.0.1")!]])
    }

    /// The proxy's listening sockets this process holds: TCP sockets
    /// listening on port 3128 in a network namespace other than its own.
    static func proxyListeners() -> Int {
        let SO_NETNS_COOKIE: CInt = 71
        func cookie(_ fd: CInt) -> UInt64? {
            var value: UInt64 = 0
            var length = socklen_t(MemoryLayout<UInt64>.size)
            return getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &value, &length) == 0 ? value : nil
        }
        let ours = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(ours) }
        guard let home = cookie(ours) else { return -1 }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return names.compactMap(CInt.init).filter { fd in
            var listening: CInt = 0
            var length = socklen_t(MemoryLayout<CInt>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0, listening == 1 else { return false }
            var address = sockaddr_in()
            var size = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &size) }
            }
            guard named == 0, address.sin_family == sa_family_t(AF_INET), UInt16(bigEndian: address.sin_port) == 3128 else { return false }
            return cookie(fd).map { $0 != home } ?? false
        }.count
    }

    /// A TCP server on the host's loopback (a process of its own, so that
    /// no descriptor of it is inherited by a launch of a parallel test)
    /// answering each connection's first bytes with "pong".
    static func server() throws -> (port: UInt16, process: Process) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Run.python)
        process.arguments = ["-c", """
            import socket
            listener = socket.create_server(("127.0.0.1", 0))
            print(listener.getsockname()[1], flush=True)
            while True:
                connection, _ = listener.accept()
                if connection.recv(64): connection.sendall(b"pong")
                connection.close()
            """]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        var line = Data()
        while let byte = try output.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) { line += byte }
        return (try #require(UInt16(String(decoding: line, as: UTF8.self))), process)
    }

    /// Two launches, one after the other, each reaching the allowed host
    /// through its own proxy: the first's end leaves the proxy thread serving.
    @Test func launchesOneAfterAnotherAreEachServed() throws {
        let scratch = Scratch()
        let (port, server) = try Self.server()
        // SIGKILL: the server inherits the test thread's blocked signals, SIGTERM among them.
        defer {
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
        }
        let client = """
            import socket
            s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
            s.sendall(b"CONNECT bench.test:\(port) HTTP/1.1\\r\\n\\r\\n")
            head = b""
            while not head.endswith(b"\\r\\n\\r\\n"):
                byte = s.recv(1)
                if not byte: break
                head += byte
            s.sendall(b"ping")
            print(head.split(b"\\r\\n")[0].decode(), s.recv(16).decode())
            """
        for _ in 0..<2 {
            let outcome = try Run.confinedPython(client, in: scratch, policy: try Self.policy(port: port), configure: Self.request)
            #expect(outcome.stdout == "HTTP/1.1 200 Connection established pong\n", "\(outcome.stdout) \(outcome.stderr)")
        }
        #expect(Self.proxyListeners() == 0)
    }

    /// A command that cannot start in the view (a program on the host only)
    /// fails the launch after the proxy was served: its sockets are closed
    /// with the failed launch, not left listening in the launcher.
    @Test func aLaunchThatFailsAfterItsProxyIsServedLeavesNoSocket() throws {
        let scratch = Scratch()
        let program = scratch.path + "/host-only"
        #expect(FileManager.default.createFile(atPath: program, contents: Data("#!/bin/sh\nexit 0\n".utf8)))
        #expect(chmod(program, 0o755) == 0)
        #expect(Self.proxyListeners() == 0)
        #expect(throws: (any Error).self) {
            _ = try Run.confined([program], in: scratch, policy: try Self.policy(port: 9), configure: Self.request)
        }
        #expect(Self.proxyListeners() == 0, "the failed launch's proxy still listens")
    }
}

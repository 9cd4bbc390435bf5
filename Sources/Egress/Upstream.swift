import Glibc
import NIOCore
import NIOPosix

/// The way out: a destination the list allows, resolved outside the sandbox
/// and connected to from the launcher's own network namespace.
enum Upstream {
    /// Why a connection was not made, as a client should hear it.
    struct Failure: Error {
        let reason: String
        /// A refusal by the policy (403, SOCKS "not allowed"), not a network error (502).
        let refused: Bool
    }

    /// The addresses a destination may be reached at. A name is resolved once
    /// (the connection goes to what was checked, so a rebinding answer later
    /// changes nothing); one matched only by a wildcard may not lead to a
    /// loopback, private, link-local or unique-local address.
    static func addresses(for destination: Destination, entry: AllowedHost, on loop: EventLoop, resolver: Resolver)
        -> EventLoopFuture<[IPAddress]>
    {
        switch destination.host {
        case .address(let address):
            return loop.makeSucceededFuture([address])
        case .name(let name):
            return resolver.resolve(name, on: loop).flatMapThrowing { found in
                guard !found.isEmpty else { throw Failure(reason: "\(name) has no address", refused: false) }
                guard case .suffix(let suffix) = entry.name else { return found }
                let outside = found.filter { !$0.isInternal }
                guard !outside.isEmpty else {
                    throw Failure(
                        reason: "\(name) resolves only to internal addresses (\(found.map(\.description).joined(separator: ", "))), "
                            + "which *.\(suffix) does not allow: name the host itself to allow them",
                        refused: true)
                }
                return outside
            }
        }
    }

    /// A connected channel to the first address that answers, with `handler`
    /// (unpaired) in its pipeline; TCP_NODELAY, half-closure allowed.
    static func connect(_ addresses: [IPAddress], port: UInt16, on loop: EventLoop, handlers: @escaping @Sendable () -> [ChannelHandler])
        -> EventLoopFuture<Channel>
    {
        guard let first = addresses.first else {
            return loop.makeFailedFuture(Failure(reason: "no address to connect to", refused: false))
        }
        let address: SocketAddress
        do {
            address = try SocketAddress(ipAddress: first.description, port: Int(port))
        } catch {
            return loop.makeFailedFuture(Failure(reason: "\(first) is no address", refused: false))
        }
        return ClientBootstrap(group: loop)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelOption(.allowRemoteHalfClosure, value: true)
            .channelOption(.recvAllocator, value: Relay.reads)
            .channelOption(.writeBufferWaterMark, value: Relay.pending)
            .connectTimeout(.seconds(10))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandlers(handlers()) }
            }
            .connect(to: address)
            .flatMapError { error in
                if addresses.count > 1 { return connect(Array(addresses.dropFirst()), port: port, on: loop, handlers: handlers) }
                return loop.makeFailedFuture(Failure(reason: "connecting to \(first) port \(port): \(error)", refused: false))
            }
    }
}

/// Names resolved outside the sandbox, off the event loop (getaddrinfo blocks).
public struct Resolver: Sendable {
    let lookup: @Sendable (String) -> [IPAddress]

    /// The system's resolver (getaddrinfo), as the launcher's user has it.
    public static let system = Resolver { name in
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(name, nil, &hints, &list) == 0, let list else { return [] }
        defer { freeaddrinfo(list) }
        var found: [IPAddress] = []
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let current = entry {
            if let address = current.pointee.ai_addr {
                if current.pointee.ai_family == AF_INET {
                    address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                        var raw = v4.pointee.sin_addr
                        found.append(IPAddress(bytes: withUnsafeBytes(of: &raw) { Array($0) })!)
                    }
                } else if current.pointee.ai_family == AF_INET6 {
                    address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                        var raw = v6.pointee.sin6_addr
                        found.append(IPAddress(bytes: withUnsafeBytes(of: &raw) { Array($0) })!)
                    }
                }
            }
            entry = current.pointee.ai_next
        }
        var seen = Set<IPAddress>()
        return found.filter { seen.insert($0).inserted }
    }

    /// A fixed table, for tests (`--resolve`-like): nothing else resolves.
    public static func fixed(_ table: [String: [IPAddress]]) -> Resolver {
        Resolver { table[$0] ?? [] }
    }

    public init(lookup: @escaping @Sendable (String) -> [IPAddress]) {
        self.lookup = lookup
    }

    func resolve(_ name: String, on loop: EventLoop) -> EventLoopFuture<[IPAddress]> {
        NIOSingletons.posixBlockingThreadPool.runIfActive(eventLoop: loop) { lookup(name) }
    }
}

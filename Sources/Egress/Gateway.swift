import Glibc
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSOCKS

/// A refusal the gateway made, for `--explain` and `--denials`.
public struct EgressRefusal: Sendable, Hashable {
    public enum Route: String, Sendable {
        case httpConnect = "HTTP CONNECT"
        case httpForward = "HTTP"
        case socks = "SOCKS5"
        case captured = "direct connection"
        case dns = "DNS"
        case serverName = "TLS server name"
    }

    /// What the command asked for, printable: `host:port`, or a DNS name.
    public let destination: String
    public let route: Route
    public let reason: String
}

/// The proxy, the DNS stub and the captured ports of one sandbox, served by
/// the launcher on sockets the keeper made in the sandbox's network
/// namespace: nothing outside that namespace can connect to them, and the
/// command reaches nothing else (its namespace holds loopback only).
///
/// One event-loop thread; the parsers are SwiftNIO's (llhttp, SOCKS5,
/// ClientHello) and the bounded DNS reader here. Bounded: `maxConnections`
/// at once, a request or handshake must finish within `handshakeTimeout`,
/// and each tunnel reads only while its other side can write.
public final class EgressGateway: @unchecked Sendable {
    /// The bounds on what one sandbox's command can hold of the launcher.
    public struct Limits: Sendable {
        /// Connections at once (tunnels and those still asking): each holds
        /// one or two of the launcher's descriptors.
        public var maxConnections = 256
        /// A request, a SOCKS handshake or a captured connection's way out
        /// must be made within this (a slow client holds nothing longer).
        public var handshakeTimeout: TimeAmount = .seconds(10)
        public init() {}
    }

    let plan: EgressPlan
    let resolver: Resolver
    let refused: @Sendable (EgressRefusal) -> Void
    let limits: Limits
    private let loop: EventLoop
    private var servers: [Channel] = []
    /// Touched on `loop` only.
    private var connections = 0
    private var names = NameTable()
    /// Every connection and upstream still open, closed by `stop`.
    private var live: [ObjectIdentifier: Channel] = [:]

    /// One event-loop thread for every gateway of the process, made at the
    /// first and never ended: a sandbox's proxy costs no thread's start and
    /// end (0.35 ms and 0.8 ms of a launch, the end through Dispatch). Its
    /// thread takes no signal of the launcher's (Ctrl-C and TERM are the
    /// main thread's).
    private static let loops: MultiThreadedEventLoopGroup = {
        var all = sigset_t(), old = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_SETMASK, &all, &old)
        defer { pthread_sigmask(SIG_SETMASK, &old, nil) }
        return MultiThreadedEventLoopGroup(numberOfThreads: 1)
    }()

    /// Starts serving `sockets` (the keeper's, one per `plan.listeners`, in
    /// order; the gateway owns them from here, closed on failure too: each
    /// is its channel's, which closes it when it cannot be served).
    public init(
        plan: EgressPlan, sockets: [CInt], resolver: Resolver = .system, limits: Limits = Limits(),
        refused: @escaping @Sendable (EgressRefusal) -> Void
    ) throws(EgressError) {
        guard sockets.count == plan.listeners.count else {
            sockets.forEach { _ = close($0) }
            throw .setup(step: "receiving the proxy's sockets (\(sockets.count) of \(plan.listeners.count))", errno: EPROTO)
        }
        self.plan = plan
        self.resolver = resolver
        self.refused = refused
        self.limits = limits
        loop = Self.loops.next()
        // All bound in one task on the loop: one wait, not one a socket.
        let loop = self.loop
        let bound = loop.flatSubmit {
            EventLoopFuture.whenAllComplete(zip(plan.listeners, sockets).map { self.bind($0, socket: $1) }, on: loop)
        }
        let results: [Result<Channel, Error>]
        do {
            results = try bound.wait()
        } catch {
            sockets.forEach { _ = close($0) }  // the task never ran: no socket was handed on
            throw .setup(step: "serving the proxy's sockets: \(error)", errno: EPROTO)
        }
        servers = results.compactMap { try? $0.get() }
        for case .failure(let error) in results {
            stop()
            throw .setup(step: "serving the proxy's sockets: \(error)", errno: EPROTO)
        }
    }

    /// Closes every socket and connection (the loop's thread serves on).
    public func stop() {
        let servers = self.servers
        try? loop.submit {
            servers.forEach { $0.close(promise: nil) }
            self.live.values.forEach { $0.close(promise: nil) }
            self.live.removeAll()
        }.wait()
    }

    private func bind(_ listener: EgressPlan.Listener, socket: CInt) -> EventLoopFuture<Channel> {
        if listener.isDatagram {
            return DatagramBootstrap(group: loop)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(DNSStubHandler(gateway: self)) }
                }
                .withBoundSocket(socket)
        }
        let kind = listener.kind
        return ServerBootstrap(group: loop)
            .serverChannelOption(.backlog, value: 128)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelOption(.recvAllocator, value: Relay.reads)
            .childChannelOption(.writeBufferWaterMark, value: Relay.pending)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try self.accepted(channel, kind: kind) }
            }
            .withBoundSocket(socket)
    }

    /// A new connection from the command: counted, bounded in time until it
    /// is a tunnel, handled by its listener's kind.
    private func accepted(_ channel: Channel, kind: EgressPlan.Kind) throws {
        guard connections < limits.maxConnections else {
            channel.close(promise: nil)
            return
        }
        connections += 1
        let id = ObjectIdentifier(channel)
        live[id] = channel
        channel.closeFuture.whenComplete { _ in
            self.connections -= 1
            self.live[id] = nil
        }
        let deadline = channel.eventLoop.scheduleTask(in: limits.handshakeTimeout) { channel.close(promise: nil) }
        let established: () -> Void = { deadline.cancel() }
        let pipeline = channel.pipeline.syncOperations
        switch kind {
        case .http:
            try pipeline.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .forwardBytes)))
            try pipeline.addHandler(HTTPProxyHandler(gateway: self, established: established))
        case .socks:
            try pipeline.addHandler(SOCKSServerHandshakeHandler())
            try pipeline.addHandler(SOCKSProxyHandler(gateway: self, established: established))
        case .captured:
            try capture(channel, established: established)
        case .dns:
            channel.close(promise: nil)
        }
    }

    /// A connection to an allowed port on the sandbox's loopback: to a
    /// captured address, tunnelled to its name; to any other, closed.
    private func capture(_ channel: Channel, established: @escaping () -> Void) throws {
        guard let local = channel.localAddress, let port = local.port, let ip = local.ipAddress,
              let address = IPAddress(ip), let name = names.name(for: address.unmapped)
        else {
            let shown = channel.localAddress.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" } ?? "?"
            report(EgressRefusal(
                destination: shown, route: .captured,
                reason: "is no allowed host's address: a program that ignores the proxy variables reaches allowed names only, by name"))
            channel.close(promise: nil)
            return
        }
        let destination = Destination(host: .name(name), port: UInt16(port))
        try channel.syncOptions?.setOption(.autoRead, value: false)
        open(destination, route: .captured, for: channel).assumeIsolated().whenComplete { result in
            switch result {
            case .success(let upstream):
                self.splice(channel, upstream, destination: destination, after: nil)
                established()
                try? channel.syncOptions?.setOption(.autoRead, value: true)
            case .failure:
                channel.close(promise: nil)
            }
        }
    }

    func report(_ refusal: EgressRefusal) { refused(refusal) }

    /// A connected upstream and the relay side waiting in its pipeline for
    /// the client's.
    struct Connected: @unchecked Sendable {
        let channel: Channel
        let relay: RelaySide
    }

    /// Lookups at once: getaddrinfo blocks a pool thread each, and a command
    /// asking for many names under a wildcard must not queue without end.
    static let maxLookups = 8
    private var lookups = 0

    /// Checks `destination` against the list, resolves it and connects. The
    /// upstream is the gateway's to close from here (stop, or `client` gone).
    func open(_ destination: Destination, route: EgressRefusal.Route, for client: Channel, upstreamHandlers: [ChannelHandler] = [])
        -> EventLoopFuture<Connected>
    {
        guard let entry = plan.hosts.entry(for: destination) else {
            let reason = "is not an allowed host: allow it with --allow-host \(destination) or the policy key "
                + "org.sandboxed-run.network.allowed-hosts"
            report(EgressRefusal(destination: destination.description, route: route, reason: reason))
            return loop.makeFailedFuture(Upstream.Failure(reason: "\(destination) " + reason, refused: true))
        }
        // Only names take a lookup (an address is connected to as it is).
        let looksUp: Bool
        if case .name = destination.host {
            guard lookups < Self.maxLookups else {
                return loop.makeFailedFuture(Upstream.Failure(
                    reason: "\(Self.maxLookups) names are being looked up at once: try again", refused: false))
            }
            lookups += 1
            looksUp = true
        } else {
            looksUp = false
        }
        let relay = RelaySide()
        nonisolated(unsafe) let extra = upstreamHandlers
        return Upstream.addresses(for: destination, entry: entry, on: loop, resolver: resolver)
            .always { _ in if looksUp { self.lookups -= 1 } }
            .flatMap { addresses in
                Upstream.connect(addresses, port: destination.port, on: self.loop) { extra + [relay.handler] }
            }
            .flatMapThrowing { upstream in
                let id = ObjectIdentifier(upstream)
                self.live[id] = upstream
                upstream.closeFuture.whenComplete { _ in self.live[id] = nil }
                // The command gave up while the way out was made: nothing to relay.
                guard client.isActive else {
                    upstream.close(promise: nil)
                    throw Upstream.Failure(reason: "the client left", refused: false)
                }
                return Connected(channel: upstream, relay: relay)
            }
            .flatMapErrorThrowing { error in
                if let failure = error as? Upstream.Failure, failure.refused {
                    self.report(EgressRefusal(destination: destination.description, route: route, reason: failure.reason))
                }
                throw error
            }
    }

    /// Joins `client` to its upstream: the server-name check, then the relay.
    /// `after`: the handler of `client`'s pipeline to add them behind (nil: first).
    func splice(_ client: Channel, _ upstream: Connected, destination: Destination, after: ChannelHandler?, checkServerName: Bool = true) {
        let check = !checkServerName ? [] : ServerNameCheck.handlers(for: destination, channel: client) { reason in
            self.report(EgressRefusal(destination: destination.description, route: .serverName, reason: reason))
        }
        do {
            let handlers = check + [upstream.relay.partner]
            if let after {
                try client.pipeline.syncOperations.addHandlers(handlers, position: .after(after))
            } else {
                try client.pipeline.syncOperations.addHandlers(handlers, position: .first)
            }
        } catch {
            client.close(promise: nil)
            upstream.channel.close(promise: nil)
        }
    }

    /// Answers one DNS query (on the loop).
    func answer(_ query: [UInt8]) -> [UInt8]? {
        let outcome = DNSAnswer.answer(query, hosts: plan.hosts, names: &names)
        if let (name, type) = outcome.refused {
            report(EgressRefusal(
                destination: name.isEmpty ? "." : name, route: .dns,
                reason: (plan.hosts.resolves(name) ? "type \(type) is not answered (only A and AAAA of allowed names)"
                    : "is not an allowed host: only allowed names resolve in the sandbox")))
        }
        return outcome.reply
    }
}

/// The upstream half of a relay pair, made before the client's half is placed.
final class RelaySide: @unchecked Sendable {
    let handler: RelayHandler
    let partner: RelayHandler
    init() {
        (handler, partner) = RelayHandler.pair()
    }
}

import SystemKit

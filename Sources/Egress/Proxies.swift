import NIOCore
import NIOHTTP1
import NIOSOCKS

/// HTTP CONNECT and absolute-form HTTP/1.1 on the proxy's port. The host
/// decided on is the CONNECT target or the URI's, never a `Host` header
/// (which a forwarded request gets anew from the URI). One request per
/// connection: a forwarded request goes with `Connection: close`.
final class HTTPProxyHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = ByteBuffer

    private enum State {
        case idle
        case connecting(buffered: [HTTPServerRequestPart], bytes: Int)
        case forwarding(Channel)
        case done
    }

    private let gateway: EgressGateway
    private let established: () -> Void
    private var state = State.idle
    /// A body held while connecting is bounded: a command sends more only
    /// once the server takes it.
    static let maxBuffered = 1 << 20

    init(gateway: EgressGateway, established: @escaping () -> Void) {
        self.gateway = gateway
        self.established = established
    }

    /// Set once the connection is closed: the decoder then hands its
    /// leftover bytes on as it is removed, which are no request part.
    private var inactive = false

    func channelInactive(context: ChannelHandlerContext) {
        inactive = true
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !inactive else { return }
        let part = unwrapInboundIn(data)
        switch (state, part) {
        case (.idle, .head(let head)):
            if head.method == .CONNECT { connect(context: context, head: head) } else { forward(context: context, head: head) }
        case (.connecting(var buffered, let bytes), _):
            var size = 0
            if case .body(let body) = part { size = body.readableBytes }
            guard bytes + size <= Self.maxBuffered else {
                return respond(context: context, status: "413 Content Too Large", reason: "a request body beyond 1 MiB before the server answered")
            }
            buffered.append(part)
            state = .connecting(buffered: buffered, bytes: bytes + size)
        case (.forwarding(let upstream), .body(let body)):
            upstream.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil)
        case (.forwarding(let upstream), .end(let trailers)):
            upstream.writeAndFlush(HTTPClientRequestPart.end(trailers), promise: nil)
            state = .done
        case (.done, .head), (.idle, _), (.forwarding, .head):
            // A second request on the connection (each gets its own), or parts out of order.
            context.close(promise: nil)
        case (.done, _):
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // llhttp refused the bytes: malformed, or framed two ways (Content-Length and Transfer-Encoding).
        if case .idle = state {
            respond(context: context, status: "400 Bad Request", reason: "the proxy could not read the request: \(error)")
        } else {
            context.close(promise: nil)
        }
    }

    private func connect(context: ChannelHandlerContext, head: HTTPRequestHead) {
        let destination: Destination
        switch Destination.parse(authority: head.uri, defaultPort: nil) {
        case .success(let parsed): destination = parsed
        case .failure(let error): return respond(context: context, status: "400 Bad Request", reason: "CONNECT HOST:PORT: \(error)")
        }
        state = .connecting(buffered: [], bytes: 0)
        let channel = context.channel
        try? channel.syncOptions?.setOption(.autoRead, value: false)
        gateway.open(destination, route: .httpConnect, for: channel).assumeIsolated().whenComplete { result in
            switch result {
            case .success(let upstream):
                let reply = channel.allocator.buffer(string: "HTTP/1.1 200 Connection established\r\n\r\n")
                context.writeAndFlush(self.wrapOutboundOut(reply), promise: nil)
                self.gateway.splice(channel, upstream, destination: destination, after: self)
                let pipeline = channel.pipeline.syncOperations
                // Bytes the command sent after the request go on through the
                // check and the relay, as the decoder hands them over.
                pipeline.removeHandler(self, promise: nil)
                if let decoder = try? pipeline.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self) {
                    pipeline.removeHandler(decoder, promise: nil)
                }
                self.established()
                try? channel.syncOptions?.setOption(.autoRead, value: true)
            case .failure(let error):
                self.fail(context: context, error)
            }
        }
    }

    private func forward(context: ChannelHandlerContext, head: HTTPRequestHead) {
        let uri = head.uri
        guard uri.utf8.count >= 7, uri.prefix(7).lowercased() == "http://" else {
            let why = uri.lowercased().hasPrefix("https://")
                ? "an https:// URL goes through CONNECT, which clients do when HTTPS_PROXY names this proxy"
                : "this is the sandbox's proxy: ask for http://HOST/PATH, or CONNECT HOST:PORT"
            return respond(context: context, status: "400 Bad Request", reason: why)
        }
        let rest = uri.dropFirst(7)
        let end = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        let authority = String(rest[..<end])
        guard !authority.contains("@") else {
            return respond(context: context, status: "400 Bad Request", reason: "a URL with a user name or password is not forwarded")
        }
        var path = String(rest[end...])
        if path.hasPrefix("#") { path = "" }
        if let fragment = path.firstIndex(of: "#") { path = String(path[..<fragment]) }
        if !path.hasPrefix("/") { path = "/" + path }
        let destination: Destination
        switch Destination.parse(authority: authority, defaultPort: 80) {
        case .success(let parsed): destination = parsed
        case .failure(let error): return respond(context: context, status: "400 Bad Request", reason: "\(error)")
        }
        // Hop-by-hop headers stay here; Host comes from the URI.
        var headers = HTTPHeaders()
        let named = Set(head.headers["connection"].flatMap { $0.split(separator: ",") }.map {
            String($0.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()).lowercased()
        })
        // Dropping a framing header the request was read by would send its
        // body on unframed: the server would read it as another request.
        guard named.isDisjoint(with: ["content-length", "transfer-encoding"]) else {
            return respond(context: context, status: "400 Bad Request",
                           reason: "Connection names Content-Length or Transfer-Encoding, which frame the request: not forwarded")
        }
        let hopByHop: Set<String> = ["connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "te",
                                     "trailer", "upgrade", "host"]
        for (name, value) in head.headers where !hopByHop.contains(name.lowercased()) && !named.contains(name.lowercased()) {
            headers.add(name: name, value: value)
        }
        headers.replaceOrAdd(name: "Host", value: destination.port == 80 ? destination.hostText : destination.description)
        headers.replaceOrAdd(name: "Connection", value: "close")
        let forwarded = HTTPRequestHead(version: .http1_1, method: head.method, uri: path, headers: headers)

        state = .connecting(buffered: [], bytes: 0)
        let channel = context.channel
        try? channel.syncOptions?.setOption(.autoRead, value: false)
        gateway.open(destination, route: .httpForward, for: channel, upstreamHandlers: [HTTPRequestEncoder()]).assumeIsolated().whenComplete { result in
            switch result {
            case .success(let connected):
                let upstream = connected.channel
                guard case .connecting(let buffered, _) = self.state else {
                    upstream.close(promise: nil)
                    return
                }
                upstream.write(HTTPClientRequestPart.head(forwarded), promise: nil)
                self.state = .forwarding(upstream)
                for part in buffered {
                    switch part {
                    case .body(let body): upstream.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil)
                    case .end(let trailers):
                        upstream.write(HTTPClientRequestPart.end(trailers), promise: nil)
                        self.state = .done
                    case .head: break
                    }
                }
                upstream.flush()
                // The answer comes back as the server's bytes, through the relay.
                self.gateway.splice(channel, connected, destination: destination, after: self, checkServerName: false)
                self.established()
                try? channel.syncOptions?.setOption(.autoRead, value: true)
            case .failure(let error):
                self.fail(context: context, error)
            }
        }
    }

    private func fail(context: ChannelHandlerContext, _ error: Error) {
        if let failure = error as? Upstream.Failure {
            respond(context: context, status: failure.refused ? "403 Forbidden" : "502 Bad Gateway", reason: failure.reason)
        } else {
            respond(context: context, status: "502 Bad Gateway", reason: "\(error)")
        }
    }

    /// A complete answer, then the connection closes: the reason goes in a
    /// header and the body, for curl -v and for a person reading a log.
    private func respond(context: ChannelHandlerContext, status: String, reason: String) {
        state = .done
        let text = "sandboxed-run: " + reason + "\n"
        let shown = String(reason.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
        let head = "HTTP/1.1 \(status)\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(text.utf8.count)\r\n"
            + "Connection: close\r\nX-Sandboxed-Run-Refused: \(shown.prefix(512))\r\n\r\n"
        let buffer = context.channel.allocator.buffer(string: head + text)
        context.writeAndFlush(wrapOutboundOut(buffer)).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}

/// SOCKS5 with names (CONNECT only; BIND and UDP ASSOCIATE are refused).
final class SOCKSProxyHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ClientMessage
    typealias OutboundOut = ServerMessage

    private let gateway: EgressGateway
    private let established: () -> Void
    private var asked = false

    init(gateway: EgressGateway, established: @escaping () -> Void) {
        self.gateway = gateway
        self.established = established
    }

    private static let none = SOCKSAddress.address(try! SocketAddress(ipAddress: "0.0.0.0", port: 0))

    /// Set once the connection is closed: the handshake handler then hands
    /// its buffered bytes on as it is removed, which are no SOCKS message.
    private var inactive = false

    func channelInactive(context: ChannelHandlerContext) {
        inactive = true
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !inactive else { return }
        switch unwrapInboundIn(data) {
        case .greeting(let greeting):
            guard greeting.methods.contains(.noneRequired) else {
                context.writeAndFlush(wrapOutboundOut(.selectedAuthenticationMethod(.init(method: .noneAcceptable))))
                    .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
                return
            }
            context.writeAndFlush(wrapOutboundOut(.selectedAuthenticationMethod(.init(method: .noneRequired))), promise: nil)
        case .authenticationData:
            context.close(promise: nil)
        case .request(let request):
            guard !asked else { return context.close(promise: nil) }
            asked = true
            handle(context: context, request: request)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }

    private func reply(_ context: ChannelHandlerContext, _ reply: SOCKSServerReply) {
        context.writeAndFlush(wrapOutboundOut(.response(SOCKSResponse(reply: reply, boundAddress: Self.none))))
            .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }

    private func handle(context: ChannelHandlerContext, request: SOCKSRequest) {
        let destination: Destination
        switch request.addressType {
        case .domain(let name, let port):
            guard port > 0, port <= 65535, case .success(let host) = Destination.host(name) else {
                gateway.report(EgressRefusal(destination: String(name.prefix(255)), route: .socks, reason: "is not a host name"))
                return reply(context, .addressUnsupported)
            }
            destination = Destination(host: host, port: UInt16(port))
        case .address(let address):
            guard let text = address.ipAddress, let ip = IPAddress(text), let port = address.port, port > 0 else {
                return reply(context, .addressUnsupported)
            }
            destination = Destination(host: .address(ip.unmapped), port: UInt16(port))
        }
        guard request.command == .connect else {
            gateway.report(EgressRefusal(
                destination: destination.description, route: .socks,
                reason: "SOCKS \(request.command == .bind ? "BIND" : request.command == .udpAssociate ? "UDP ASSOCIATE" : "command \(request.command.value)") is refused: CONNECT only"))
            return reply(context, .commandUnsupported)
        }
        let channel = context.channel
        try? channel.syncOptions?.setOption(.autoRead, value: false)
        gateway.open(destination, route: .socks, for: channel).assumeIsolated().whenComplete { result in
            switch result {
            case .success(let upstream):
                let pipeline = channel.pipeline.syncOperations
                guard let handshake = try? pipeline.handler(type: SOCKSServerHandshakeHandler.self) else {
                    channel.close(promise: nil)
                    upstream.channel.close(promise: nil)
                    return
                }
                let bound = upstream.channel.localAddress.map { SOCKSAddress.address($0) } ?? Self.none
                context.writeAndFlush(self.wrapOutboundOut(.response(SOCKSResponse(reply: .succeeded, boundAddress: bound))), promise: nil)
                self.gateway.splice(channel, upstream, destination: destination, after: self)
                pipeline.removeHandler(self, promise: nil)
                pipeline.removeHandler(handshake, promise: nil)
                self.established()
                try? channel.syncOptions?.setOption(.autoRead, value: true)
            case .failure(let error):
                let refused = (error as? Upstream.Failure)?.refused ?? false
                self.reply(context, refused ? .notAllowed : .hostUnreachable)
            }
        }
    }
}

/// The DNS stub: one UDP socket on the sandbox's 127.0.0.1:53.
final class DNSStubHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    typealias OutboundOut = AddressedEnvelope<ByteBuffer>

    private let gateway: EgressGateway

    init(gateway: EgressGateway) {
        self.gateway = gateway
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        guard let reply = gateway.answer(Array(envelope.data.readableBytesView)) else { return }
        let out = AddressedEnvelope(remoteAddress: envelope.remoteAddress, data: context.channel.allocator.buffer(bytes: reply))
        context.writeAndFlush(wrapOutboundOut(out), promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {}  // a bad datagram is not the stub's end
}

import SystemKit

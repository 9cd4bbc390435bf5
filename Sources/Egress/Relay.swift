import NIOCore
import NIOTLS

/// The relay's buffers: reads of up to 256 KiB (fewer system calls a
/// megabyte), and at most 256 KiB waiting to be written on a side before it
/// stops its partner's reads: 256 connections hold at most some 128 MiB.
/// A connection's first read takes 16 KiB, which a request fits: a first
/// buffer of 64 KiB, freed at once, made the allocator give memory back to
/// the kernel at every request (a madvise, whose TLB shootdown interrupts
/// the other core): 0.17 ms a request (Benchmarks/network.sh).
enum Relay {
    static let reads = AdaptiveRecvByteBufferAllocator(minimum: 2_048, initial: 16_384, maximum: 262_144)
    static let pending = ChannelOptions.Types.WriteBufferWaterMark(low: 131_072, high: 262_144)
}

/// One side of a tunnel: what one channel reads, its partner writes. A side
/// reads only while its partner can write, so a peer that stops reading
/// stops the other side instead of growing the launcher's memory.
final class RelayHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny
    typealias OutboundOut = NIOAny

    private var partner: RelayHandler?
    private var context: ChannelHandlerContext?
    private var pendingRead = false

    static func pair() -> (RelayHandler, RelayHandler) {
        let first = RelayHandler(), second = RelayHandler()
        first.partner = second
        second.partner = first
        return (first, second)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        partner?.partnerBecameWritable()  // a side added earlier may be waiting to read
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        partner = nil
    }

    /// Flushed at once: bytes a removed decoder hands on (the CONNECT
    /// request's leftovers, a held ClientHello) come with no read-complete.
    private func partnerWrite(_ data: NIOAny) { context?.writeAndFlush(data, promise: nil) }
    private func partnerFlush() { context?.flush() }
    private func partnerWriteEOF() { context?.close(mode: .output, promise: nil) }
    private func partnerClose() { context?.close(promise: nil) }
    private func partnerBecameWritable() {
        if pendingRead {
            pendingRead = false
            context?.read()
        }
    }
    private var partnerWritable: Bool { context?.channel.isWritable ?? false }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) { partner?.partnerWrite(data) }
    func channelReadComplete(context: ChannelHandlerContext) { partner?.partnerFlush() }
    func channelInactive(context: ChannelHandlerContext) { partner?.partnerClose() }
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, case .inputClosed = event { partner?.partnerWriteEOF() }
        context.fireUserInboundEventTriggered(event)
    }
    func errorCaught(context: ChannelHandlerContext, error: Error) {
        partner?.partnerClose()
        context.close(promise: nil)
    }
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { partner?.partnerBecameWritable() }
    }
    func read(context: ChannelHandlerContext) {
        if partner?.partnerWritable ?? false {
            context.read()
        } else {
            pendingRead = true
        }
    }
}

/// The first bytes the command sends through a tunnel: a TLS ClientHello
/// naming another server than the one the tunnel was allowed for is refused
/// (domain fronting, a CONNECT to an allowed host carrying another's TLS).
/// Checked before a byte reaches the server.
enum ServerNameCheck {
    /// What the first read began with: a TLS handshake record whose server
    /// name SNIHandler cannot read (a ClientHello split across records, which
    /// servers accept) is refused for a named host instead of passed on.
    /// Bytes that begin no TLS record pass at once, the check removed:
    /// SNIHandler would wait for a record's five-byte header, and a client
    /// that sends less and waits for an answer would wait for ever.
    private final class FirstByte: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        var value: UInt8?
        /// Weak: the check's closure holds this handler.
        weak var check: (any RemovableChannelHandler)?
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if value == nil, let first: UInt8 = unwrapInboundIn(data).getInteger(at: unwrapInboundIn(data).readerIndex) {
                value = first
                if !ServerNameCheck.recordTypes.contains(first), let check {
                    // The check (next in line) leaves first, so that these bytes pass it.
                    let pipeline = context.pipeline.syncOperations
                    pipeline.removeHandler(check, promise: nil)
                    context.fireChannelRead(data)
                    pipeline.removeHandler(context: context, promise: nil)
                    return
                }
            }
            context.fireChannelRead(data)
        }
    }

    /// The first byte of a TLS record: change_cipher_spec, alert, handshake, application_data, heartbeat.
    static let recordTypes: ClosedRange<UInt8> = 0x14...0x18

    /// The handlers for a tunnel to `destination` on `channel`, in order;
    /// `refused` runs with the reason when the check closes the channel.
    static func handlers(for destination: Destination, channel: Channel, refused: @escaping (String) -> Void) -> [ChannelHandler] {
        let first = FirstByte()
        let check = SNIHandler { result in
            let loop = channel.eventLoop
            let firstByte = first.value
            channel.pipeline.syncOperations.removeHandler(first, promise: nil)
            let host = destination.hostText
            switch (result, destination.host) {
            case (.hostname(let sent), .name(let allowed)):
                var name = sent.lowercased()
                if name.hasSuffix(".") { name.removeLast() }
                if name == allowed { return loop.makeSucceededVoidFuture() }
                refused("the TLS ClientHello names \(Printable.path(sent, limit: 255)), not \(host): a tunnel carries only the allowed host's TLS")
            case (.hostname(let sent), .address):
                refused("the TLS ClientHello names \(Printable.path(sent, limit: 255)), but the tunnel was allowed for the address \(host)")
            case (.fallback, .name):
                // Bytes that are no TLS record (plain HTTP, SSH) go on; a TLS
                // record whose server name cannot be read does not: a
                // ClientHello split across records, or a record of another
                // type sent ahead of it.
                guard let firstByte, recordTypes.contains(firstByte) else { return loop.makeSucceededVoidFuture() }
                refused("a TLS record whose server name cannot be read (a ClientHello split across records, or another record first): "
                    + "a tunnel to \(host) carries only a ClientHello naming it")
            case (.fallback, .address):
                return loop.makeSucceededVoidFuture()
            }
            channel.close(promise: nil)
            return loop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
        let checking = ByteToMessageHandler(check)
        first.check = checking
        return [first, checking]
    }
}

import SystemKit

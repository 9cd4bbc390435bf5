// What every message on the live-grant broker's socket must get, one message
// at a time: the oracle of Fuzz/LiveGrantFuzzer (libFuzzer) and of
// LiveGrantFuzzTests (seeded, in `swift test`). A finding is a sentence; an
// empty list means none. A trap or a hang is a finding the caller sees itself.
@preconcurrency import Glibc
@_spi(Fuzzing) import Sandbox
import CSyscalls

/// docs/live-grants.md's tables, read independently of the decoders: what a
/// well-formed request and reply are.
@_spi(Fuzzing) public enum LiveGrantWireSpec {
    static func littleEndian(_ bytes: [UInt8], _ at: Int) -> Int { Int(bytes[at]) | Int(bytes[at + 1]) << 8 }

    public static func isRequest(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 6, bytes.count <= 8198, bytes[0] == 1, (1...3).contains(bytes[1]), bytes[3] == 0 else { return false }
        let length = littleEndian(bytes, 4)
        guard bytes.count == 6 + length else { return false }
        return bytes[1] == 1 ? bytes[2] & ~3 == 0 && length <= 512 : bytes[2] == 0 && (1...8192).contains(length)
    }

    public static func isReply(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 4, bytes.count <= 16390, bytes[0] == 1, (0...7).contains(bytes[1]) || (11...17).contains(bytes[1]) else {
            return false
        }
        let length = littleEndian(bytes, 2)
        guard length <= 8192, bytes.count >= 4 + length else { return false }
        let rest = bytes.count - 4 - length
        return rest == 0 || rest >= 2 && (1...8192).contains(littleEndian(bytes, 4 + length)) && rest == 2 + littleEndian(bytes, 4 + length)
    }
}

/// What a message carries besides its bytes.
@_spi(Fuzzing) public enum LiveGrantAttachment: CaseIterable, Sendable {
    case nothing
    /// SCM_RIGHTS with one descriptor: it must never enter the broker's process.
    case descriptor
    /// SCM_CREDENTIALS with the sender's own pid, uid and gid. The broker's
    /// socket does not ask for credentials (no SO_PASSCRED), so the kernel
    /// drops them: the request is served as if sent without.
    case credentials
}

/// A real broker on a real socketpair, whose handler counts its calls and
/// answers from the request alone.
@_spi(Fuzzing) public final class LiveGrantWireOracle {
    public let broker: LiveGrantBroker
    let command: CInt
    /// A pipe's read end, sent with `.descriptor`: any other descriptor of
    /// its inode in this process is one the broker took in.
    let sentinel: CInt
    let sentinelIdentity: (dev_t, ino_t)
    /// Calls of the handler, and the last request it was given.
    public private(set) var handled = 0
    private var lastRequest: LiveGrantRequest?
    /// Messages sent, and how many of them decoded.
    public private(set) var messages = 0, requests = 0

    public init() throws {
        broker = try LiveGrantBroker()
        command = broker.commandDescriptor!
        var pipe: [CInt] = [-1, -1]
        // Close-on-exec from the start: the tests run this in a process that spawns programs meanwhile.
        precondition(csb_pipe_cloexec(&pipe) == 0, "pipe: errno \(errno)")
        sentinel = pipe[0]
        close(pipe[1])  // of the same inode
        var status = stat()
        precondition(fstat(sentinel, &status) == 0)
        sentinelIdentity = (status.st_dev, status.st_ino)
        broker.handler = { [unowned self] request, _ in
            handled += 1
            lastRequest = request
            return .reply(Self.answer(request))
        }
    }

    deinit { close(sentinel) }

    /// SCM_CREDENTIALS (a GNU name Glibc's module does not export).
    static let credentialsType: CInt = 2

    /// The handler's answer: everything in it comes from the request, so a reply can be checked against it.
    static func answer(_ request: LiveGrantRequest) -> LiveGrantReply {
        let bookmark = request.wantsBookmark || request.operation == .startAccessing ? [request.operation.rawValue] + request.payload : nil
        return LiveGrantReply(status: request.readOnly ? .cancelled : .granted, text: request.payload, bookmark: bookmark)
    }

    /// Sends `bytes` from the command's end, has the broker serve one message, and checks:
    /// exactly one reply, well-formed; the handler called once, with the
    /// request the bytes decode to, and its answer sent, or, for a message
    /// that does not decode or carries a descriptor, `malformed` and no call;
    /// nothing left unread; no descriptor taken in.
    public func check(_ bytes: [UInt8], attaching: LiveGrantAttachment = .nothing) -> [String] {
        let what = "\(bytes.count) bytes \(bytes.prefix(8))… with \(attaching)"
        let expected = attaching == .descriptor ? nil : try? LiveGrantRequest.decode(bytes)
        messages += 1
        if expected != nil { requests += 1 }
        let sent = send(bytes, attaching: attaching)
        guard sent == bytes.count else { return ["\(what): sending it failed (\(sent), errno \(errno))"] }
        var problems: [String] = []
        let handledBefore = handled, servedBefore = broker.served
        lastRequest = nil
        if !broker.serveOne(hungUp: false) { problems.append("\(what): the broker stopped serving") }
        if broker.served != servedBefore + 1 { problems.append("\(what): \(broker.served - servedBefore) messages served for one") }
        let replies = receiveAll()
        if replies.count != 1 { problems.append("\(what): \(replies.count) replies") }
        if let bytes = replies.first {
            if let reply = try? LiveGrantReply.decode(bytes) {
                if let expected {
                    if handled != handledBefore + 1 || lastRequest != expected {
                        problems.append("\(what): the handler was called \(handled - handledBefore) times, with \(String(describing: lastRequest))")
                    }
                    if reply != Self.answer(expected) { problems.append("\(what): the reply is not the handler's: \(reply.status)") }
                } else {
                    if handled != handledBefore { problems.append("\(what): the handler was called for a message that is no request") }
                    if reply.status != .malformed || reply.bookmark != nil { problems.append("\(what): answered \(reply.status), not malformed") }
                }
            } else {
                problems.append("\(what): a reply that does not decode: \(bytes.prefix(16))")
            }
        }
        // The broker read this one message whole: nothing is left for it.
        _ = broker.serveOne(hungUp: false)
        if broker.served != servedBefore + 1 || !receiveAll().isEmpty { problems.append("\(what): the broker read a second message") }
        if attaching == .descriptor, let taken = descriptorsTakenIn() { problems.append("\(what): descriptor \(taken) entered the broker") }
        return problems
    }

    private func send(_ bytes: [UInt8], attaching: LiveGrantAttachment) -> Int {
        // struct cmsghdr, then the data: one int (SCM_RIGHTS) or a struct ucred (SCM_CREDENTIALS).
        let header = MemoryLayout<cmsghdr>.size
        var control = [UInt8](repeating: 0, count: header + 16)
        let data: [UInt8] = switch attaching {
        case .nothing: []
        case .descriptor: withUnsafeBytes(of: sentinel) { Array($0) }
        // struct ucred: pid, uid, gid.
        case .credentials: withUnsafeBytes(of: getpid()) { Array($0) } + withUnsafeBytes(of: getuid()) { Array($0) }
            + withUnsafeBytes(of: getgid()) { Array($0) }
        }
        control.withUnsafeMutableBytes { raw in
            let cmsg = raw.baseAddress!.assumingMemoryBound(to: cmsghdr.self)
            cmsg.pointee.cmsg_len = header + data.count
            cmsg.pointee.cmsg_level = SOL_SOCKET
            cmsg.pointee.cmsg_type = attaching == .descriptor ? CInt(SCM_RIGHTS) : Self.credentialsType
            for (i, byte) in data.enumerated() { raw[header + i] = byte }
        }
        var payload = bytes
        return payload.withUnsafeMutableBytes { payload in
            control.withUnsafeMutableBytes { control in
                var vector = iovec(iov_base: payload.baseAddress, iov_len: payload.count)
                return withUnsafeMutablePointer(to: &vector) { vector in
                    var message = msghdr()
                    message.msg_iov = vector
                    message.msg_iovlen = 1
                    if attaching != .nothing {
                        message.msg_control = control.baseAddress
                        message.msg_controllen = (header + data.count + 7) & ~7
                    }
                    var sent: Int
                    repeat { sent = sendmsg(command, &message, CInt(MSG_DONTWAIT) | CInt(MSG_NOSIGNAL)) } while sent < 0 && errno == EINTR
                    return sent
                }
            }
        }
    }

    /// Every message waiting at the command's end.
    private func receiveAll() -> [[UInt8]] {
        var replies: [[UInt8]] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let got = buffer.withUnsafeMutableBytes { recv(command, $0.baseAddress, $0.count, CInt(MSG_DONTWAIT)) }
            if got < 0 && errno == EINTR { continue }
            guard got >= 0 else { return replies }
            replies.append(Array(buffer[..<got]))
        }
    }

    /// A descriptor of the sentinel's inode other than the sentinel: one the broker received.
    private func descriptorsTakenIn() -> CInt? {
        guard let folder = opendir("/proc/self/fd") else { return nil }
        defer { closedir(folder) }
        while let entry = readdir(folder) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let fd = CInt(name), fd != sentinel, fd != dirfd(folder) else { continue }
            var status = stat()
            if fstat(fd, &status) == 0, status.st_dev == sentinelIdentity.0, status.st_ino == sentinelIdentity.1 { return fd }
        }
        return nil
    }

    /// The decoders on arbitrary bytes: each accepts exactly what the
    /// documentation calls well-formed, and what it accepts re-encodes to the same bytes.
    public static func checkDecoders(_ bytes: [UInt8]) -> [String] {
        var problems: [String] = []
        let request = try? LiveGrantRequest.decode(bytes)
        if (request != nil) != LiveGrantWireSpec.isRequest(bytes) {
            problems.append("request \(bytes.prefix(8))… (\(bytes.count) bytes): decoded \(request != nil), the documentation says \(!(request != nil))")
        }
        if let request, request.encoded() != bytes { problems.append("request \(bytes.prefix(8))…: re-encodes to other bytes") }
        let reply = try? LiveGrantReply.decode(bytes)
        if (reply != nil) != LiveGrantWireSpec.isReply(bytes) {
            problems.append("reply \(bytes.prefix(8))… (\(bytes.count) bytes): decoded \(reply != nil), the documentation says \(!(reply != nil))")
        }
        if let reply, reply.encoded() != bytes { problems.append("reply \(bytes.prefix(8))…: re-encodes to other bytes") }
        return problems
    }

    /// Any reply the broker could build (through `init`, or with its fields
    /// set afterwards) encodes to bytes that decode, to the reply `init` makes of its fields.
    public static func checkReply(_ reply: LiveGrantReply) -> [String] {
        let bytes = reply.encoded()
        guard let decoded = try? LiveGrantReply.decode(bytes) else {
            return ["a reply (\(reply.status), \(reply.text.count) bytes of text, bookmark \(reply.bookmark.map { "\($0.count) bytes" } ?? "none")) that does not decode"]
        }
        let normal = LiveGrantReply(status: reply.status, text: reply.text, bookmark: reply.bookmark)
        return decoded == normal ? [] : ["a reply (\(reply.status)) that decodes to another"]
    }

    /// A reply made from fuzz input: the first byte picks the status, whether
    /// there is a bookmark, and whether text and bookmark are lengthened after
    /// `init` (up to 65 KiB and 16 KiB); the second where the text ends.
    public static func reply(from bytes: [UInt8]) -> LiveGrantReply {
        guard bytes.count >= 2 else { return LiveGrantReply(status: .granted, text: bytes) }
        let choice = Int(bytes[0]), body = Array(bytes.dropFirst(2))
        let split = Int(bytes[1]) * body.count / 255
        let text = Array(body[..<split]), rest = Array(body[split...])
        let statuses = LiveGrantReply.Status.allCases
        var reply = LiveGrantReply(status: statuses[choice % statuses.count], text: text, bookmark: choice & 0x80 != 0 ? rest : nil)
        if choice & 0x40 != 0 { reply.text = text + [UInt8](repeating: 0x41, count: Int(bytes[1]) << 8) }
        if choice & 0x20 != 0 { reply.bookmark = rest + [UInt8](repeating: 0x42, count: Int(bytes[1]) << 6) }
        return reply
    }
}

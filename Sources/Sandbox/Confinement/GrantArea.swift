@preconcurrency import Glibc
import CLaunch
import CSyscalls
import SystemPackage

/// Live grants: what a launch offers the command while it runs.
public enum LiveGrantSupport: Sendable, Equatable {
    /// No broker socket.
    case none
    /// The broker socket (when the policy has a `user-selected` key), every
    /// request answered by `LiveGrantBroker.handler`; nothing can be attached.
    case broker
    /// The socket, and in the private view the grant area and its helper, so
    /// that the handler can attach folders (`LiveGrantArea.attach`).
    case attach
}

// MARK: The wire protocol (docs/live-grants.md)

/// One request from the command: every byte of it is the command's.
public struct LiveGrantRequest: Equatable, Sendable {
    public enum Operation: UInt8, Sendable {
        /// Ask the user for a folder; the payload is the prompt.
        case openPanel = 1
        /// Make the folder of a bookmark of this app's reachable; the payload is the bookmark.
        case startAccessing = 2
        /// End one `startAccessing` of a bookmark; the payload is the bookmark.
        case stopAccessing = 3
    }

    public var operation: Operation
    /// Open panel: ask for read-only access (the policy may cap a read-write one).
    public var readOnly: Bool
    /// Open panel: the reply carries a bookmark of the folder, sealed for this app.
    public var wantsBookmark: Bool
    /// Open panel: text for the picker (shown escaped and cut); otherwise the bookmark.
    public var payload: [UInt8]

    public static let version: UInt8 = 1
    public static let headerSize = 6
    public static let maximumPrompt = 512
    /// A bookmark is smaller than this (a 4095-byte path and a 255-byte app id included).
    public static let maximumBookmark = 8192
    /// The largest request; anything longer is refused whole.
    public static let maximumSize = headerSize + maximumBookmark
    static let readOnlyFlag: UInt8 = 1
    static let bookmarkFlag: UInt8 = 2

    public init(operation: Operation, readOnly: Bool = false, wantsBookmark: Bool = false, payload: [UInt8]) {
        self.operation = operation
        self.readOnly = readOnly
        self.wantsBookmark = wantsBookmark
        self.payload = payload
    }

    /// The most `payload` may hold for `operation`.
    public static func maximumPayload(_ operation: Operation) -> Int {
        operation == .openPanel ? maximumPrompt : maximumBookmark
    }

    /// version, operation, flags, 0, payload length (u16 little-endian), payload.
    public func encoded() -> [UInt8] {
        let length = min(payload.count, Self.maximumPayload(operation))
        let flags = (readOnly ? Self.readOnlyFlag : 0) | (wantsBookmark ? Self.bookmarkFlag : 0)
        return [Self.version, operation.rawValue, flags, 0, UInt8(length & 0xFF), UInt8(length >> 8)] + payload.prefix(length)
    }

    /// Decodes exactly one request; anything else is refused, naming why.
    public static func decode(_ bytes: [UInt8]) throws(LiveGrantWireError) -> LiveGrantRequest {
        guard bytes.count >= headerSize else { throw .malformed("a request is at least \(headerSize) bytes, this one \(bytes.count)") }
        guard bytes.count <= maximumSize else { throw .malformed("a request is at most \(maximumSize) bytes") }
        guard bytes[0] == version else { throw .malformed("protocol version \(bytes[0]); this broker speaks \(version)") }
        guard let operation = Operation(rawValue: bytes[1]) else { throw .malformed("unknown operation \(bytes[1])") }
        let allowed = operation == .openPanel ? readOnlyFlag | bookmarkFlag : 0
        guard bytes[2] & ~allowed == 0, bytes[3] == 0 else { throw .malformed("unknown flags") }
        let length = Int(bytes[4]) | Int(bytes[5]) << 8
        guard length <= maximumPayload(operation), bytes.count == headerSize + length else {
            throw .malformed("the payload's length (\(length), at most \(maximumPayload(operation))) does not match the request's (\(bytes.count - headerSize) bytes after the header)")
        }
        guard operation == .openPanel || length > 0 else { throw .malformed("no bookmark") }
        return LiveGrantRequest(
            operation: operation, readOnly: bytes[2] & readOnlyFlag != 0, wantsBookmark: bytes[2] & bookmarkFlag != 0,
            payload: Array(bytes[headerSize...]))
    }
}

/// The broker's answer.
public struct LiveGrantReply: Equatable, Sendable {
    public enum Status: UInt8, Sendable, CaseIterable {
        /// `text` is the path at which the command now reaches the folder.
        case granted = 0
        /// The user chose nothing.
        case cancelled = 1
        /// Nobody to ask: the launch has no picker.
        case noPicker = 2
        /// Live grants cannot be had in this sandbox (the host view, a policy without the keys).
        case unavailable = 3
        /// The folder may not be granted, or attaching it failed; `text` says why.
        case refused = 4
        /// The request was not one this broker understands; nothing was done.
        case malformed = 5
        /// Too many requests: the user is not asked again yet.
        case busy = 6
        /// `stopAccessing` of a bookmark this sandbox is not accessing.
        case notAccessing = 7
        /// The bookmark was not followed: the outcomes of `resolve`, with its exit codes.
        case replaced = 11
        case missing = 12
        case revoked = 13
        case wrongApp = 14
        case invalid = 15
        case covered = 16
        case inaccessible = 17
    }

    public var status: Status
    /// A path (granted) or a message, as bytes.
    public var text: [UInt8]
    /// A bookmark for the command to keep (an open panel's `-o`, or one
    /// renewed because the folder moved): the command writes it.
    public var bookmark: [UInt8]?

    public static let maximumText = 8192
    /// version, status, text length, text, and at most a bookmark with its length.
    public static let maximumSize = 4 + maximumText + 2 + LiveGrantRequest.maximumBookmark

    /// An empty bookmark is none: the wire has no way to send one.
    public init(status: Status, text: [UInt8], bookmark: [UInt8]? = nil) {
        self.status = status
        self.text = Array(text.prefix(Self.maximumText))
        self.bookmark = bookmark.flatMap { $0.isEmpty ? nil : Array($0.prefix(LiveGrantRequest.maximumBookmark)) }
    }

    public init(status: Status, message: String) {
        self.init(status: status, text: Array(message.utf8))
    }

    /// version, status, text length (u16 little-endian), text; then, only
    /// when there is one, bookmark length (u16 little-endian), bookmark.
    /// Fields set after `init` are cut as `init` cuts them: the command can
    /// decode every reply.
    public func encoded() -> [UInt8] {
        let text = self.text.prefix(Self.maximumText)
        var bytes = [LiveGrantRequest.version, status.rawValue, UInt8(text.count & 0xFF), UInt8(text.count >> 8)] + text
        if let bookmark = bookmark?.prefix(LiveGrantRequest.maximumBookmark), !bookmark.isEmpty {
            bytes += [UInt8(bookmark.count & 0xFF), UInt8(bookmark.count >> 8)] + bookmark
        }
        return bytes
    }

    public static func decode(_ bytes: [UInt8]) throws(LiveGrantWireError) -> LiveGrantReply {
        guard bytes.count >= 4, bytes.count <= maximumSize else { throw .malformed("a reply of \(bytes.count) bytes") }
        guard bytes[0] == LiveGrantRequest.version else { throw .malformed("protocol version \(bytes[0])") }
        guard let status = Status(rawValue: bytes[1]) else { throw .malformed("unknown status \(bytes[1])") }
        let length = Int(bytes[2]) | Int(bytes[3]) << 8
        guard length <= maximumText, bytes.count >= 4 + length else { throw .malformed("the text's length does not match the reply's") }
        let text = Array(bytes[4..<4 + length])
        let rest = bytes.count - 4 - length
        if rest == 0 { return LiveGrantReply(status: status, text: text) }
        guard rest >= 2 else { throw .malformed("a reply with a truncated bookmark") }
        let bookmarkLength = Int(bytes[4 + length]) | Int(bytes[5 + length]) << 8
        guard bookmarkLength > 0, bookmarkLength <= LiveGrantRequest.maximumBookmark, rest == 2 + bookmarkLength else {
            throw .malformed("the bookmark's length does not match the reply's")
        }
        return LiveGrantReply(status: status, text: text, bookmark: Array(bytes[(6 + length)...]))
    }
}

public enum LiveGrantWireError: Error, Equatable, CustomStringConvertible, Sendable {
    case malformed(String)

    public var description: String {
        switch self {
        case .malformed(let why): "malformed live-grant message: \(why)"
        }
    }
}

// MARK: The broker's socket

/// The launcher's end of the command's broker socket (SOCK_SEQPACKET, an
/// inherited descriptor, no path anywhere). One request is read and
/// answered at a time; a request with descriptors attached, longer than
/// `LiveGrantRequest.maximumSize`, or malformed is answered `.malformed` and
/// nothing else happens. Credentials a command attaches (SCM_CREDENTIALS)
/// the kernel drops, since the socket does not ask for them (no
/// SO_PASSCRED): the request is served as if sent without.
public final class LiveGrantBroker: @unchecked Sendable {
    /// Nil once the broker stopped serving: closed, so that a command still
    /// waiting for an answer reads the end instead of waiting for ever.
    private(set) var socket: OwnedDescriptor?
    /// The command's end, until the command has it.
    private(set) var commandEnd: OwnedDescriptor?
    /// Decides each well-formed request: a reply now, or a question to the
    /// person the wait loop waits on (`pending`).
    public var handler: ((LiveGrantRequest, LiveGrantContext) -> LiveGrantOutcome)?
    /// The area of the running sandbox, set by the launch.
    var area: LiveGrantArea?
    /// The user's terminal, while the launcher relays one.
    var terminal: LiveGrantTerminal?
    /// The question being asked: no other request is read until it is answered.
    private(set) var pending: LiveGrantQuestion?
    /// Requests answered so far (each a message read), for tests and reports.
    public private(set) var served = 0
    /// Until every process holding the command's end is gone.
    var serving: Bool { socket != nil }
    /// Requests are read: serving, and no question waits for the person.
    var reading: Bool { socket != nil && pending == nil }

    @_spi(Fuzzing) public init() throws(SandboxError) {
        var pair: [CInt] = [-1, -1]
        guard socketpair(AF_UNIX, CInt(SOCK_SEQPACKET.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw .setup(step: "making the live-grant broker's socket", errno: Errno(rawValue: errno))
        }
        socket = OwnedDescriptor(taking: pair[0])
        commandEnd = OwnedDescriptor(taking: pair[1])
    }

    /// The command's end's number, the same in the command (it is kept, not moved).
    @_spi(Fuzzing) public var commandDescriptor: CInt? { commandEnd?.rawValue }

    /// Once the command holds its end: ours closes, so that the socket
    /// reports its end when the command's last process is gone.
    func commandStarted() { commandEnd = nil }

    /// poll's POLLRDHUP (a GNU extension Glibc's module does not export): the peer shut down.
    static let pollReadHangUp = Int16(0x2000)

    /// Closes the launcher's end: no request is read or answered after this.
    func stopServing() { socket = nil }

    /// Reads and answers one request; false once the command's end is
    /// closed. `hungUp`: poll said the command's end shut down (POLLHUP or
    /// POLLRDHUP). Only then is a read of 0 bytes the end: without it, it is
    /// an empty message, which is answered like any malformed one.
    @_spi(Fuzzing) public func serveOne(hungUp: Bool) -> Bool {
        guard let socket else { return false }
        var buffer = [UInt8](repeating: 0, count: LiveGrantRequest.maximumSize + 1)
        var message = msghdr()
        let received: Int = buffer.withUnsafeMutableBytes { bytes in
            var vector = iovec(iov_base: bytes.baseAddress, iov_len: bytes.count)
            return withUnsafeMutablePointer(to: &vector) { vector in
                message.msg_iov = vector
                message.msg_iovlen = 1
                // No control buffer: a descriptor the command sends never
                // enters the launcher; the kernel drops it and says so (MSG_CTRUNC).
                message.msg_control = nil
                message.msg_controllen = 0
                while true {
                    let got = recvmsg(socket.rawValue, &message, CInt(MSG_DONTWAIT) | CInt(MSG_CMSG_CLOEXEC))
                    if got < 0 && errno == EINTR { continue }
                    return got
                }
            }
        }
        if received == 0 && hungUp { return false }
        if received < 0 { return errno == EAGAIN }
        served += 1
        var reply: LiveGrantReply
        if received == 0 {
            reply = LiveGrantReply(status: .malformed, message: "an empty request: a request is at least \(LiveGrantRequest.headerSize) bytes")
        } else if message.msg_flags & CInt(MSG_CTRUNC) != 0 {
            reply = LiveGrantReply(status: .malformed, message: "descriptors sent with a request are refused")
        } else if message.msg_flags & CInt(MSG_TRUNC) != 0 || received > LiveGrantRequest.maximumSize {
            reply = LiveGrantReply(status: .malformed, message: "a request is at most \(LiveGrantRequest.maximumSize) bytes")
        } else {
            do {
                let request = try LiveGrantRequest.decode(Array(buffer[..<received]))
                switch handler?(request, LiveGrantContext(area: area, terminal: terminal)) {
                case .reply(let answer): reply = answer
                case .asking(let question):
                    pending = question
                    return true
                case nil: reply = LiveGrantReply(status: .unavailable, message: "this launch answers no live-grant requests")
                }
            } catch {
                reply = LiveGrantReply(status: .malformed, message: error.description)
            }
        }
        send(reply)
        return true
    }

    /// After each wake of the loop while a question is pending (`ready`:
    /// its descriptor polled ready): its reply is sent once it is answered.
    func advance(ready: Bool) {
        guard let question = pending, let reply = question.advance(ready: ready) else { return }
        pending = nil
        send(reply)
    }

    /// The sandbox ends: a question still asked is put away unanswered.
    func abandonQuestion() {
        pending?.abandon()
        pending = nil
    }

    private func send(_ reply: LiveGrantReply) {
        guard let socket else { return }
        let bytes = reply.encoded()
        // The command reads its answers: one that never does only stops its own requests.
        _ = bytes.withUnsafeBytes { Glibc.send(socket.rawValue, $0.baseAddress, $0.count, CInt(MSG_DONTWAIT) | CInt(MSG_NOSIGNAL)) }
    }
}

// MARK: The grant area

/// What of a running sandbox's grants can be taken away while it runs:
/// the folders attached in its grant area (`area`) and, in the private
/// view, the mount of each launch-time grant. The launch fills it in; the
/// service that watches the ledger (AppSandbox's `LiveGrantService`) uses
/// it, through `watch` and `recheck`, which the wait loop calls.
public final class RunningGrants: @unchecked Sendable {
    /// The helper's client: set in the private view when there is an area
    /// or a launch-time grant to detach; nil otherwise.
    public internal(set) var area: LiveGrantArea?
    /// Each launch-time grant's own mount in the view, with the grants (by
    /// name) it holds; removed once detached.
    var launchMounts: [(grants: [String], mount: OwnedDescriptor)] = []
    /// While something can be revoked: a descriptor to wait on for news of
    /// revocations (nil: none) and the longest wait before `recheck` runs
    /// anyway (milliseconds; -1: none). nil when nothing is to be watched.
    public var watch: (() -> (descriptor: CInt?, timeout: CInt)?)?
    /// Runs after every wake while `watch` gives something.
    public var recheck: (() -> Void)?
    /// Why a revoked grant could not be taken away: the wait loop then ends
    /// the sandbox (fail closed) and `wait()` throws `.revocationFailed`.
    public private(set) var failedRevocation: String?

    init() {}

    /// The supervisor's, set by the launch when it records watches.
    var watchForgetter: ((InodeIdentity) -> Bool)?

    /// Removes the command's inotify watches on `folder` (taken away) and
    /// beneath it; false when one could not be removed.
    public func forgetWatches(of folder: OwnedDescriptor) -> Bool {
        guard let watchForgetter else { return true }
        guard let identity = try? folder.status().inodeIdentity else { return false }
        return watchForgetter(identity)
    }

    /// The command is gone: nothing is attached or taken away any more.
    func release() {
        launchMounts = []
        area?.close()
        area = nil
    }

    /// A revoked grant stays reachable: the sandbox must end.
    public func revocationFailed(_ reason: String) {
        if failedRevocation == nil { failedRevocation = reason }
    }

    /// Whether the mount whose root `root` is lies beneath mount `outer`,
    /// found by walking `..` up from it (across mounts, in the view's
    /// namespace, whatever the paths are called now).
    static func mount(_ root: OwnedDescriptor, liesBeneath outer: UInt64) -> Bool {
        guard var at = try? root.duplicate() else { return false }
        for _ in 0..<4096 {
            let fd = openat(at.rawValue, "..", CSB_O_PATH | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else { return false }
            let up = OwnedDescriptor(taking: fd)
            guard let id = up.mountID else { return false }
            if id == outer { return true }
            guard let here = try? at.status(), let there = try? up.status(), at.mountID != id || here.inodeIdentity != there.inodeIdentity else {
                return false  // the root of the view
            }
            at = up
        }
        return false
    }

    /// The launch-time grants that still have a mount of their own in the view.
    public var launchGrants: [String] { launchMounts.flatMap(\.grants) }

    /// Detaches each launch-time mount all of whose grants are in `revoked`;
    /// returns the names of the grants cut. A mount whose detach failed
    /// stays listed (tried again at the next call) and the error is thrown
    /// after the others were tried.
    public func detachLaunchGrants(_ revoked: Set<String>) throws(LiveGrantAreaError) -> [String] {
        var cut: [String] = []
        var failure: LiveGrantAreaError?
        var kept: [(grants: [String], mount: OwnedDescriptor)] = []
        var handedOver = Set<ObjectIdentifier>()
        for entry in launchMounts where !handedOver.contains(ObjectIdentifier(entry.mount)) {
            guard entry.grants.allSatisfy(revoked.contains) else {
                kept.append(entry)
                continue
            }
            // Grants nested beneath it (mounts of their own inside its
            // folder) go with it: the helper unmounts them first, which
            // the launcher's descriptors of them would make it refuse.
            let outer = entry.mount.mountID
            for other in launchMounts where other.mount !== entry.mount && !handedOver.contains(ObjectIdentifier(other.mount)) {
                guard let outer, Self.mount(other.mount, liesBeneath: outer) else { continue }
                handedOver.insert(ObjectIdentifier(other.mount))
                kept.removeAll { $0.mount === other.mount }
                cut += other.grants
                _ = Glibc.close(other.mount.release())
            }
            guard let area else {
                failure = .notAttachable("no grant helper for this sandbox")
                kept.append(entry)
                continue
            }
            // The mount is handed over to the helper, whatever comes of it: a
            // revoked grant that could not be detached (held, or the helper
            // failed) ends the sandbox, so nothing is tried again.
            let identity = try? entry.mount.status().inodeIdentity
            do {
                try area.detachMount(entry.mount)
                cut += entry.grants
                if let identity, let watchForgetter, !watchForgetter(identity) {
                    failure = .watchesRemain
                } else if identity == nil {
                    failure = .watchesRemain
                }
            } catch {
                failure = error
            }
        }
        launchMounts = kept
        if let failure { throw failure }
        return cut
    }
}

/// The grant area of a running sandbox's private view, and its grant
/// helper, forked on first use (see `Sources/CLaunch/grantarea.c`).
public final class LiveGrantArea: @unchecked Sendable {
    /// Where the area is in the view: each grant is a folder beneath it.
    public static let path = FilePath(CSB_GRANT_AREA)

    /// What the helper needs: the keeper's pidfd (its mount namespace is
    /// the view's), the area's writable mount and its O_PATH in the view.
    private struct Mounts {
        let keeper: OwnedDescriptor
        let userNamespace: Bool
        /// nil where the sandbox has no area: only launch-time grants are detached.
        let area: OwnedDescriptor?
        let areaView: OwnedDescriptor?
    }
    private var mounts: Mounts?
    /// The launcher's end of the helper's socket, and the helper's pidfd.
    private var helper: (socket: OwnedDescriptor, pidfd: OwnedDescriptor?)?
    let executeAllowed: Bool
    private var next = 1
    /// Each request's number, echoed in its reply.
    private var sequence: UInt64 = 0
    /// How long the helper may take to answer (a folder on a stuck network mount), in milliseconds.
    let timeout: CInt

    /// nil when the keeper's pidfd cannot be duplicated (out of descriptors).
    init?(keeper: OwnedDescriptor, userNamespace: Bool, area: OwnedDescriptor?, areaView: OwnedDescriptor?,
          executeAllowed: Bool, timeout: CInt = 10_000) {
        guard let copy = try? keeper.duplicate() else { return nil }
        mounts = Mounts(keeper: copy, userNamespace: userNamespace, area: area, areaView: areaView)
        self.executeAllowed = executeAllowed
        self.timeout = timeout
    }

    /// For tests: a helper already at the other end of `helper`.
    init(helper: OwnedDescriptor, executeAllowed: Bool, timeout: CInt = 10_000) {
        mounts = nil
        self.helper = (helper, nil)
        self.executeAllowed = executeAllowed
        self.timeout = timeout
    }

    deinit { stopHelper() }

    /// The sandbox ended: the helper is stopped and the mounts are let go
    /// (others may still hold this object, the broker among them).
    func close() {
        stopHelper()
        mounts = nil
    }

    /// The helper exits when our end of its socket closes; it is reaped here.
    func stopHelper() {
        guard let helper else { return }
        self.helper = nil
        _ = shutdown(helper.socket.rawValue, CInt(SHUT_RDWR))
        guard let pidfd = helper.pidfd else { return }
        // A helper stuck in the kernel (a clone of a folder on a hung network
        // mount) must not hold the launcher: a second, then SIGKILL.
        var exited = pollfd(fd: pidfd.rawValue, events: Int16(POLLIN), revents: 0)
        var polled: CInt
        repeat { polled = poll(&exited, 1, 1000) } while polled < 0 && errno == EINTR
        if polled == 0 { _ = csb_pidfd_send_signal(pidfd.rawValue, SIGKILL) }
        var info = siginfo_t()
        while waitid(idtype_t(rawValue: 3) /* P_PIDFD */, id_t(pidfd.rawValue), &info, WEXITED) < 0 && errno == EINTR {}
    }

    /// How long a sandbox runs (ms) before its helper is forked ahead of any request.
    static let prepareAfter: Int64 = 100

    /// Forks the helper now, if it is not there yet (a failure is met again at the first request).
    func prepare() {
        _ = try? helperSocket()
    }

    /// The helper's socket, forking the helper the first time.
    private func helperSocket() throws(LiveGrantAreaError) -> CInt {
        if let helper { return helper.socket.rawValue }
        guard let mounts else { throw .helperGone(.brokenPipe) }
        var pair: [CInt] = [-1, -1]
        guard socketpair(AF_UNIX, CInt(SOCK_SEQPACKET.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw .helperGone(Errno(rawValue: errno))
        }
        let ours = OwnedDescriptor(taking: pair[0])
        let theirs = OwnedDescriptor(taking: pair[1])
        var pidfd: CInt = -1
        guard csb_grant_helper_spawn(mounts.keeper.rawValue, mounts.userNamespace ? 1 : 0, mounts.area?.rawValue ?? -1, mounts.areaView?.rawValue ?? -1, theirs.rawValue, &pidfd) == 0 else {
            throw .helperGone(Errno(rawValue: errno))
        }
        helper = (ours, OwnedDescriptor(taking: pidfd))
        return ours.rawValue
    }

    /// Attaches `folder` (held open until the helper answered, so its inode
    /// cannot be reused) and returns where the command reaches it now:
    /// read-only unless `writable`, nosuid, nodev, noexec unless the policy
    /// lets the command execute files of its grants.
    public func attach(_ folder: OwnedDescriptor, writable: Bool) throws(LiveGrantAreaError) -> FilePath {
        guard canAttach else { throw .notAttachable("this sandbox has no grant area (its policy takes no live grants)") }
        guard let status = try? folder.status(), status.isDirectory, let path = FilePath.pathBytes(ofDescriptor: folder.rawValue),
              path.first == UInt8(ascii: "/"), path.count < 4096 else {
            throw .notAttachable("the folder has no path the sandbox's host namespace could find it at (deleted, or not reachable from /)")
        }
        let name = String(next)
        next += 1
        var request = csb_grant_request()
        request.operation = UInt32(CSB_GRANT_ATTACH.rawValue)
        request.flags = (writable ? UInt32(CSB_GRANT_WRITABLE.rawValue) : 0) | (executeAllowed ? UInt32(CSB_GRANT_EXECUTE.rawValue) : 0)
        request.device = UInt64(status.st_dev)
        request.inode = UInt64(status.st_ino)
        withUnsafeMutableBytes(of: &request.name) { bytes in for (i, byte) in name.utf8.enumerated() { bytes[i] = byte } }
        withUnsafeMutableBytes(of: &request.path) { bytes in for (i, byte) in path.enumerated() { bytes[i] = byte } }
        do {
            try exchange(request)
        } catch .helperGone(.timedOut) {
            // The helper may still attach it: a detach queued behind the
            // attach takes it away again, so that no folder stays reachable
            // that the launcher does not know of (its reply is dropped).
            var undo = csb_grant_request()
            undo.operation = UInt32(CSB_GRANT_DETACH.rawValue)
            undo.name = request.name
            _ = send(undo)
            throw .helperGone(.timedOut)
        }
        return Self.path.appending(name)
    }

    /// Detaches the live grant at `path`, only when nothing in the sandbox
    /// holds the folder; `.held` (still attached) otherwise.
    public func detach(_ path: FilePath) throws(LiveGrantAreaError) {
        guard path.removingLastComponent() == Self.path, let name = path.lastComponent?.string,
              !name.isEmpty, name.count < 16, name.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw .notAttachable("\(path) is not a live grant")
        }
        var request = csb_grant_request()
        request.operation = UInt32(CSB_GRANT_DETACH.rawValue)
        withUnsafeMutableBytes(of: &request.name) { bytes in for (i, byte) in name.utf8.enumerated() { bytes[i] = byte } }
        // A folder in use for a moment (an `ls` under way) is let go soon:
        // the helper asks again for 50 ms before it counts as held.
        try exchange(request)
    }

    /// Whether folders can be attached (the sandbox has an area).
    public var canAttach: Bool { helper != nil && mounts == nil || mounts?.area != nil }

    /// Detaches a launch-time grant's mount (`mount`: its root, as the
    /// keeper attached it), only when nothing in the sandbox holds it
    /// (`.held` otherwise). The launcher's descriptor is closed as it is
    /// sent: it would keep the mount busy. Every failure throws, EINVAL
    /// too (a mount locked in the sandbox's user namespace, such as a host
    /// mount copied with the folder, cannot be unmounted alone): the
    /// caller then ends the sandbox, never counts the folder as cut.
    func detachMount(_ mount: OwnedDescriptor) throws(LiveGrantAreaError) {
        var request = csb_grant_request()
        request.operation = UInt32(CSB_GRANT_DETACH_MOUNT.rawValue)
        request.name.0 = CChar(UInt8(ascii: "0"))
        try exchange(request, passing: mount.rawValue, handingOver: mount)
    }

    /// Sends `request` numbered; returns its number, nil when it could not be sent.
    private func send(_ request: csb_grant_request, passing descriptor: CInt = -1) -> UInt64? {
        guard let socket = try? helperSocket() else { return nil }
        var request = request
        sequence += 1
        request.sequence = sequence
        return csb_grant_send(socket, &request, descriptor) == MemoryLayout<csb_grant_request>.size ? sequence : nil
    }

    /// Sends `request` and waits for its own reply: replies to requests
    /// that timed out before (their number is older) are dropped.
    /// `handingOver`: closed once the request is sent (or could not be).
    private func exchange(_ request: csb_grant_request, passing descriptor: CInt = -1, handingOver: OwnedDescriptor? = nil) throws(LiveGrantAreaError) {
        let socket: CInt
        let sent: UInt64?
        do {
            defer { if let handingOver { _ = Glibc.close(handingOver.release()) } }
            socket = try helperSocket()
            sent = send(request, passing: descriptor)
        }
        guard let expected = sent else { throw .helperGone(Errno(rawValue: errno)) }
        let deadline = Self.milliseconds() + Int64(timeout)
        while true {
            var ready = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let remaining = CInt(clamping: max(0, deadline - Self.milliseconds()))
            let polled = poll(&ready, 1, remaining)
            if polled < 0 && errno == EINTR { continue }
            guard polled == 1 else { throw .helperGone(polled == 0 ? .timedOut : Errno(rawValue: errno)) }
            var reply = csb_grant_reply()
            var got: Int
            repeat { got = withUnsafeMutableBytes(of: &reply) { recv(socket, $0.baseAddress, $0.count, 0) } } while got < 0 && errno == EINTR
            guard got == MemoryLayout<csb_grant_reply>.size else { throw .helperGone(got == 0 ? .brokenPipe : Errno(rawValue: errno)) }
            guard reply.sequence == expected else { continue }
            if reply.error != 0 && reply.step == Int32(CSB_GRANT_STEP_HELD.rawValue) { throw .held }
            if reply.error != 0 { throw .failed(step: Self.describe(step: reply.step), errno: Errno(rawValue: reply.error)) }
            return
        }
    }

    static func milliseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1000 + Int64(time.tv_nsec) / 1_000_000
    }

    static func describe(step: Int32) -> String {
        switch UInt32(step) {
        case CSB_GRANT_STEP_REQUEST.rawValue: "the request to the grant helper"
        case CSB_GRANT_STEP_START.rawValue: "starting the grant helper (joining the sandbox's user namespace, a namespace of the host's tree)"
        case CSB_GRANT_STEP_HOST.rawValue: "entering the namespace that sees the host's tree"
        case CSB_GRANT_STEP_CLONE.rawValue: "cloning the folder (a folder mounted on the host after the launch is not there)"
        case CSB_GRANT_STEP_IDENTITY.rawValue: "checking the clone is the folder chosen (it was moved or replaced meanwhile)"
        case CSB_GRANT_STEP_FLAGS.rawValue: "making the clone nosuid, nodev, read-only or noexec"
        case CSB_GRANT_STEP_VIEW.rawValue: "entering the view's namespace again"
        case CSB_GRANT_STEP_MOUNT_POINT.rawValue: "making the mount point in the grant area"
        case CSB_GRANT_STEP_ATTACH.rawValue: "attaching the folder in the grant area"
        case CSB_GRANT_STEP_DETACH.rawValue: "detaching the grant"
        case CSB_GRANT_STEP_HELD.rawValue: "detaching the grant while nothing holds it"
        default: "step \(step)"
        }
    }
}

public enum LiveGrantAreaError: Error, Equatable, CustomStringConvertible, Sendable {
    case notAttachable(String)
    /// The helper did not answer (it ended with the sandbox, or hangs).
    case helperGone(Errno)
    case failed(step: String, errno: Errno)
    /// A folder was taken away, but a watch the command put in it could not be removed.
    case watchesRemain
    /// The command still holds the folder (a descriptor or working directory
    /// in it at any depth, a file open there, one in flight): it stays
    /// attached, since detached under what the command holds it would still
    /// show its names and attributes.
    case held

    public var description: String {
        switch self {
        case .notAttachable(let why): why
        case .watchesRemain: "a watch the command put in the folder could not be removed"
        case .held:
            "the command still holds the folder (a descriptor or working directory in it, or a file open there)"
        case .helperGone(let error): "the sandbox's grant helper did not answer (\(error)): the sandbox is ending"
        case .failed(let step, let error) where error == .invalidArgument && step == LiveGrantArea.describe(step: Int32(CSB_GRANT_STEP_DETACH.rawValue)):
            "\(step) failed: \(error): the kernel refuses to unmount a mount locked in the sandbox's user namespace "
                + "(most often a mount of the host's that lies inside the folder, copied with it)"
        case .failed(let step, let error): "\(step) failed: \(error)"
        }
    }
}

extension ConfinementPlan {
    /// The command's rights in the grant area: what the policy lets a
    /// user-selected folder have (read-only or a grant's read-write rights,
    /// links only with `files.symbolic-links`), execute only with
    /// `files.execute`. Each grant's mount flags narrow it further.
    static func grantAreaRights(policy: Policy, refer: Bool) -> Landlock.FileAccess {
        var rights = policy.userSelectedAccess == .readWrite ? temporaryRights(policy: policy, refer: refer) : Landlock.FileAccess.readOnly
        if policy.executeFiles { rights.insert(.execute) } else { rights.remove(.execute) }
        return rights
    }
}

// MARK: The client (inside the sandbox)

/// The command's side: one request on the inherited broker socket, and its answer.
public enum LiveGrantClient {
    /// `fd` must be a SOCK_SEQPACKET socket (the broker's, inherited).
    public static func send(_ request: LiveGrantRequest, on fd: CInt) throws(LiveGrantClientError) -> LiveGrantReply {
        var type: CInt = 0
        var length = socklen_t(MemoryLayout<CInt>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0, type == CInt(SOCK_SEQPACKET.rawValue) else {
            throw .notABroker(fd)
        }
        let bytes = request.encoded()
        var sent: Int
        repeat { sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, CInt(MSG_NOSIGNAL)) } } while sent < 0 && errno == EINTR
        guard sent == bytes.count else { throw .brokerGone(Errno(rawValue: errno)) }
        var buffer = [UInt8](repeating: 0, count: LiveGrantReply.maximumSize + 1)
        var got: Int
        repeat { got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) } } while got < 0 && errno == EINTR
        guard got > 0 else { throw .brokerGone(got == 0 ? .brokenPipe : Errno(rawValue: errno)) }
        do { return try LiveGrantReply.decode(Array(buffer[..<got])) } catch { throw .malformedReply(error.description) }
    }
}

public enum LiveGrantClientError: Error, Equatable, CustomStringConvertible, Sendable {
    case notABroker(CInt)
    case brokerGone(Errno)
    case malformedReply(String)

    public var description: String {
        switch self {
        case .notABroker(let fd): "descriptor \(fd) is not a live-grant broker's socket"
        case .brokerGone(let error): "the broker did not answer (\(error))"
        case .malformedReply(let why): why
        }
    }
}

@preconcurrency import Glibc
import Grants
import Sandbox
import SystemPackage

/// A picker program the launcher runs unconfined, as ssh and git run an
/// askpass program: its one argument is the prompt (escaped, cut to
/// `AskpassPicker.promptLimit` characters), it prints the chosen folder's
/// absolute path and a newline (any bytes but NUL and newline) and exits 0;
/// any other status means the person cancelled.
public struct AskpassPicker: Sendable {
    public let program: String
    public static let promptLimit = 200
    /// The most a picker may print: a path and its newline.
    static let outputLimit = 4096

    public init(program: String) {
        self.program = program
    }

    /// The path the person chose, nil when they cancelled.
    public func choose(prompt: String) throws(LiveGrantPickerError) -> [UInt8]? {
        var pipe: [CInt] = [-1, -1]
        guard Glibc.pipe(&pipe) == 0 else { throw .couldNotRun(program: program, errno: Errno(rawValue: errno)) }
        // Close-on-exec at once: nothing else the launcher starts may hold the picker's output.
        _ = fcntl(pipe[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(pipe[1], F_SETFD, FD_CLOEXEC)
        var readEnd: CInt? = pipe[0]
        defer { if let readEnd { close(readEnd) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(program), strdup(prompt), nil]
        defer { argv.forEach { free($0) } }
        let spawned = posix_spawnp(&pid, program, &actions, nil, argv, environ)
        close(pipe[1])
        guard spawned == 0 else { throw .couldNotRun(program: program, errno: Errno(rawValue: spawned)) }
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1024)
        while output.count <= Self.outputLimit {
            let got = chunk.withUnsafeMutableBytes { read(pipe[0], $0.baseAddress, $0.count) }
            if got < 0 && errno == EINTR { continue }
            if got <= 0 { break }
            output += chunk[..<got]
        }
        close(pipe[0])
        readEnd = nil  // a picker still writing gets SIGPIPE
        var status: CInt = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status & 0x7F == 0, (status >> 8) & 0xFF == 0 else { return nil }
        guard output.count <= Self.outputLimit, output.last == UInt8(ascii: "\n"),
              output.filter({ $0 == UInt8(ascii: "\n") }).count == 1, !output.contains(0), output.count > 1 else {
            throw .badOutput(program: program)
        }
        return Array(output.dropLast())
    }
}

public enum LiveGrantPickerError: Error, Equatable, CustomStringConvertible, Sendable {
    case couldNotRun(program: String, errno: Errno)
    case badOutput(program: String)
    case notAbsolute

    public var description: String {
        switch self {
        case .couldNotRun(let program, let errno): "the picker \(Printable.message(program)) could not be run: \(errno)"
        case .badOutput(let program):
            "the picker \(Printable.message(program)) printed something other than one path and a newline (at most \(AskpassPicker.outputLimit) bytes, no NUL)"
        case .notAbsolute: "the picker printed a relative path: it must print an absolute one"
        }
    }
}

/// What the broker does for one sandbox's requests (`LiveGrantBroker.handler`).
/// - An open panel asks the person through the picker (never taking a path
///   from the command), checks the folder as `pick` does (links an app could
///   have planted are not followed, protected folders refused), records the
///   grant in the ledger, and has the grant helper attach it; the grant counts
///   only once it is attached. With a bookmark asked for, the reply carries
///   one sealed for this app: the command writes it.
/// - `startAccessing` resolves a bookmark the command presents for this
///   sandbox's app, with every rule of `resolve` (revoked, another app's,
///   invalid, replaced, missing, covered, inaccessible: refused), follows a
///   moved folder (the renewed bookmark goes back to the command), and
///   attaches the folder; starts are counted per grant, and `stopAccessing`
///   detaches at zero. A folder an open panel attached stays for the run.
/// - While folders are attached it watches the ledger (inotify on the state
///   folder, and a re-check every `recheckInterval` in case a change was
///   missed) and detaches every grant that is no longer live.
/// The policy caps the access; nothing is offered without its key.
public final class LiveGrantService: @unchecked Sendable {
    let session: SandboxSession
    let app: AppID
    let policy: Policy
    let picker: AskpassPicker?
    /// The sandbox's record in the state folder: the grants attached are
    /// written there, so that `grants revoke` can say it cut them.
    let registration: SandboxRegistration?
    /// Prompts allowed in a burst, and how fast they come back: a command
    /// cannot flood the person with pickers. The refill counts from when the
    /// last picker closed, never the time a picker was on screen.
    static let burst = 3.0, perSecond = 0.5
    private var tokens = LiveGrantService.burst
    private var last = LiveGrantService.now()
    /// After this many cancelled prompts in a row the person is not asked
    /// for `firstPause` seconds, twice as long after each further cancel
    /// (at most `longestPause`); a folder chosen ends the pauses.
    static let cancelsBeforePause = 3
    static let firstPause = 10.0, longestPause = 600.0
    private var cancelsInARow = 0
    private var quietUntil = 0.0

    /// A folder attached in this sandbox.
    struct Attached {
        let path: FilePath
        /// `startAccessing` calls not yet ended.
        var starts: Int
        /// Attached by an open panel: stays until the sandbox ends or the grant is revoked.
        var pinned: Bool
    }
    private(set) var attached: [GrantID: Attached] = [:]
    private var area: LiveGrantArea?
    /// The most folders attached at once, and starts of one grant: bounds what a command can make the helper hold.
    static let maximumAttached = 256, maximumStarts = 1 << 20
    /// Watches the state folder while folders are attached.
    private var inotify: CInt = -1
    /// The ledger, read through one connection kept open: opening one writes
    /// SQLite's shared-memory file, which would wake the watch again.
    private var ledger: GrantBroker?
    private var lastCheck = 0.0
    /// The backstop: the ledger is read this often (seconds) even without news of a change.
    public static let recheckInterval = 1.0
    /// Ledger checks made so far (for tests and benchmarks).
    public private(set) var checks = 0

    public init(session: SandboxSession, app: AppID, policy: Policy, picker: AskpassPicker?, registration: SandboxRegistration? = nil) {
        self.session = session
        self.app = app
        self.policy = policy
        self.picker = picker
        self.registration = registration
    }

    deinit {
        if inotify >= 0 { close(inotify) }
    }

    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// Serves `broker`'s requests and watches for revocations.
    public func serve(_ broker: LiveGrantBroker) {
        broker.handler = { request, area in self.handle(request, area: area) }
        broker.watch = { self.watch() }
        broker.recheck = { self.recheck() }
    }

    public func handle(_ request: LiveGrantRequest, area: LiveGrantArea?) -> LiveGrantReply {
        switch request.operation {
        case .openPanel: openPanel(request, area: area)
        case .startAccessing: startAccessing(request.payload, area: area)
        case .stopAccessing: stopAccessing(request.payload)
        }
    }

    private func openPanel(_ request: LiveGrantRequest, area: LiveGrantArea?) -> LiveGrantReply {
        guard policy.userSelectedAccess != nil else {
            return LiveGrantReply(status: .unavailable, message: "policy \(policy.source) takes no user-selected folders")
        }
        guard let picker else {
            return LiveGrantReply(status: .noPicker, message: "nobody to ask: the sandbox was started without a picker (run --picker PROGRAM)")
        }
        guard let area else {
            return LiveGrantReply(status: .unavailable, message: "live grants need the private view; this sandbox runs in the host view")
        }
        guard !request.wantsBookmark || policy.bookmarksAppScope else {
            return LiveGrantReply(status: .unavailable, message: "policy \(policy.source) keeps no bookmarks (\(Policy.bookmarksAppScopeKey))")
        }
        guard attached.count < Self.maximumAttached else {
            return LiveGrantReply(status: .busy, message: "this sandbox holds \(Self.maximumAttached) folders already")
        }
        let now = Self.now()
        guard now >= quietUntil else {
            return LiveGrantReply(status: .busy, message: "the person cancelled \(cancelsInARow) prompts in a row: "
                + "not asked again for \(Int((quietUntil - now).rounded(.up))) s")
        }
        tokens = min(Self.burst, tokens + max(0, now - last) * Self.perSecond)
        last = now
        guard tokens >= 1 else { return LiveGrantReply(status: .busy, message: "too many requests: the person is not asked again yet") }
        tokens -= 1
        // The person's pause starts when the picker closes.
        defer { last = Self.now() }
        let access: GrantAccess = request.readOnly || policy.userSelectedAccess != .readWrite ? .readOnly : .readWrite
        let asked = Printable.path(String(decoding: request.payload, as: UTF8.self), limit: AskpassPicker.promptLimit)
        let prompt = "\(app) asks for a folder (\(access.rawValue))" + (asked.isEmpty ? "" : ": " + asked)
        do {
            guard let chosen = try picker.choose(prompt: prompt) else {
                cancelsInARow += 1
                if cancelsInARow >= Self.cancelsBeforePause {
                    let doublings = Double(min(cancelsInARow - Self.cancelsBeforePause, 16))
                    quietUntil = Self.now() + min(Self.longestPause, Self.firstPause * pow(2, doublings))
                }
                return LiveGrantReply(status: .cancelled, message: "the person chose no folder")
            }
            cancelsInARow = 0
            let path = FilePath(bytes: chosen)
            guard path.isAbsolute else { throw LiveGrantPickerError.notAbsolute }
            let folder = try session.folder(path) { problem in GrantError.bookmarkFile(path: Printable.path(path), problem: problem) }
            var reached: FilePath?
            let issued = try session.broker().grant(app: app, opened: folder, access: access) { _ in
                reached = try area.attach(folder, writable: access == .readWrite)
            }
            guard let reached else { return LiveGrantReply(status: .refused, message: "the folder was not attached") }
            self.area = area
            attached[issued.id] = Attached(path: reached, starts: 0, pinned: true)
            // Only what revoke reports depends on the record: the launcher detaches a revoked grant either way.
            try? registration?.attached(issued.id, path: issued.path)
            return LiveGrantReply(status: .granted, text: reached.bytes, bookmark: request.wantsBookmark ? issued.bookmark : nil)
        } catch {
            return LiveGrantReply(status: .refused, message: "\(error)")
        }
    }

    private func startAccessing(_ blob: [UInt8], area: LiveGrantArea?) -> LiveGrantReply {
        guard policy.bookmarksAppScope, policy.userSelectedAccess != nil else {
            return LiveGrantReply(status: .unavailable, message: "policy \(policy.source) opens no bookmarks "
                + "(it needs \(Policy.bookmarksAppScopeKey) and a user-selected key)")
        }
        guard let area else {
            return LiveGrantReply(status: .unavailable, message: "live grants need the private view; this sandbox runs in the host view")
        }
        do {
            let broker = try session.broker()
            let resolution = try broker.resolve(blob, app: app)
            guard resolution.status == .fresh || resolution.status == .moved, let folder = resolution.folder,
                  let path = resolution.currentPath, let grant = resolution.grant else {
                let status = LiveGrantReply.Status(rawValue: UInt8(resolution.status.exitCode)) ?? .invalid
                return LiveGrantReply(status: status, message: "\(resolution.status.rawValue): \(resolution.message)")
            }
            // The folder may have come to hold the broker's own state since it was granted.
            try broker.checkNotProtected(folder, path: path)
            // A moved folder (or an older key): the grant follows it, and the command keeps the new bookmark.
            let renewed = resolution.isStale ? try broker.renew(resolution, app: app) : nil
            if var entry = attached[grant.id] {
                guard entry.starts < Self.maximumStarts else {
                    return LiveGrantReply(status: .busy, message: "this bookmark was started \(Self.maximumStarts) times")
                }
                entry.starts += 1
                attached[grant.id] = entry
                return LiveGrantReply(status: .granted, text: entry.path.bytes, bookmark: renewed)
            }
            guard attached.count < Self.maximumAttached else {
                return LiveGrantReply(status: .busy, message: "this sandbox holds \(Self.maximumAttached) folders already")
            }
            let writable = resolution.access == .readWrite && policy.userSelectedAccess == .readWrite
            let reached = try area.attach(folder, writable: writable)
            self.area = area
            attached[grant.id] = Attached(path: reached, starts: 1, pinned: false)
            try? registration?.attached(grant.id, path: path)
            return LiveGrantReply(status: .granted, text: reached.bytes, bookmark: renewed)
        } catch {
            return LiveGrantReply(status: .refused, message: "\(error)")
        }
    }

    private func stopAccessing(_ blob: [UInt8]) -> LiveGrantReply {
        guard policy.bookmarksAppScope, policy.userSelectedAccess != nil else {
            return LiveGrantReply(status: .unavailable, message: "policy \(policy.source) opens no bookmarks")
        }
        let id: GrantID?
        do { id = try session.broker().grantID(of: blob, app: app) } catch {
            return LiveGrantReply(status: .refused, message: "\(error)")
        }
        guard let id else { return LiveGrantReply(status: .invalid, message: "not a bookmark of \(app)") }
        guard var entry = attached[id], entry.starts > 0 else {
            return LiveGrantReply(status: .notAccessing, message: "this sandbox is not accessing that bookmark's folder")
        }
        entry.starts -= 1
        attached[id] = entry
        if entry.starts == 0 && !entry.pinned {
            do { try detach(id) } catch {
                return LiveGrantReply(status: .refused, message: "\(error)")
            }
        }
        return LiveGrantReply(status: .granted, text: entry.path.bytes)
    }

    private func detach(_ id: GrantID) throws(LiveGrantAreaError) {
        guard let entry = attached[id] else { return }
        guard let area else { throw .notAttachable("no grant area") }
        try area.detach(entry.path)
        attached[id] = nil
        try? registration?.detached(id)
    }

    // MARK: Revocation

    /// What the launcher's wait loop polls while folders are attached.
    func watch() -> (descriptor: CInt?, timeout: CInt)? {
        guard !attached.isEmpty else { return nil }
        if inotify < 0 { startWatching() }
        let remaining = max(0, lastCheck + Self.recheckInterval - Self.now())
        return (inotify >= 0 ? inotify : nil, CInt(remaining * 1000) + 1)
    }

    private func startWatching() {
        guard let broker = try? session.broker() else { return }
        ledger = broker
        // Every change of the ledger (a revocation is a write to it or its
        // journal) and a state folder moved or deleted wake the launcher.
        let fd = inotify_init1(CInt(IN_NONBLOCK | IN_CLOEXEC))
        let events = UInt32(IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE
            | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF)
        if fd >= 0, inotify_add_watch(fd, "/proc/self/fd/\(broker.stateDescriptor)", events) >= 0 {
            inotify = fd
        } else if fd >= 0 {
            close(fd)
        }
    }

    private func stopWatching() {
        if inotify >= 0 { close(inotify) }
        inotify = -1
        ledger = nil
    }

    /// Reads the ledger when it changed or the backstop is due, and detaches
    /// each attached grant that is no longer live. A ledger that cannot be
    /// read keeps nothing attached.
    func recheck() {
        guard !attached.isEmpty else { return }
        var changed = false
        var moved = false
        if inotify >= 0 {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let got = buffer.withUnsafeMutableBytes { read(inotify, $0.baseAddress, $0.count) }
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { break }
                // struct inotify_event: wd, mask, cookie, len, then len bytes of name.
                var offset = 0
                while offset + 16 <= got {
                    let mask = buffer[offset + 4..<offset + 8].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
                    let length = Int(buffer[offset + 12..<offset + 16].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
                    let name = buffer[(offset + 16)..<min(got, offset + 16 + length)].prefix { $0 != 0 }
                    if mask & UInt32(IN_MOVE_SELF | IN_DELETE_SELF | IN_IGNORED | IN_Q_OVERFLOW) != 0 { moved = true }
                    // Readers write SQLite's shared memory; only other names tell of a change.
                    if !name.elementsEqual("\(GrantBroker.ledgerFileName)-shm".utf8) { changed = true }
                    offset += 16 + length
                }
            }
        }
        // The state folder moved or was replaced: read it again where it is now.
        if moved { stopWatching() }
        guard changed || Self.now() >= lastCheck + Self.recheckInterval else { return }
        check()
    }

    func check() {
        checks += 1
        let ids = Array(attached.keys)
        if ledger == nil { ledger = try? session.broker() }
        // Read again through a new connection once before concluding the ledger cannot be read.
        var live = try? ledger?.liveness(of: ids)
        if live == nil {
            ledger = try? session.broker()
            live = try? ledger?.liveness(of: ids)
        }
        let known = live ?? [:]
        for id in ids where known[id] != true {
            // A detach that fails (the helper gone: the sandbox is ending) is tried again at the next check.
            try? detach(id)
        }
        lastCheck = Self.now()
    }
}

extension SandboxSession {
    /// The live-grant handler for a launch of `app` under `policy`.
    public func liveGrantService(app: AppID, policy: Policy, picker: AskpassPicker?, registration: SandboxRegistration? = nil) -> LiveGrantService {
        LiveGrantService(session: self, app: app, policy: policy, picker: picker, registration: registration)
    }
}

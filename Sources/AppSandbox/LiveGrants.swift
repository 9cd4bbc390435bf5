@preconcurrency import Glibc
import CSyscalls
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

    /// Starts the picker with `prompt`: the launcher's wait loop reads its
    /// output as it comes (`Running`), so that nothing else waits for the person.
    public func start(prompt: String) throws(LiveGrantPickerError) -> Running {
        var pipe: [CInt] = [-1, -1]
        // Close-on-exec from the start: a process another thread of the
        // launcher starts meanwhile must not hold the picker's output open.
        guard csb_pipe_cloexec(&pipe) == 0 else { throw .couldNotRun(program: program, errno: Errno(rawValue: errno)) }
        _ = fcntl(pipe[0], F_SETFL, O_NONBLOCK)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
        // Only stdin, stdout and stderr: not what the launcher inherited
        // (`--keep-fd` descriptors are the command's) nor one of its own that
        // some code left without close-on-exec.
        guard csb_spawn_close_from(&actions, 3) == 0 else { throw .couldNotRun(program: program, errno: Errno(rawValue: errno)) }
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(program), strdup(prompt), nil]
        defer { argv.forEach { free($0) } }
        let spawned = posix_spawnp(&pid, program, &actions, nil, argv, environ)
        close(pipe[1])
        guard spawned == 0 else {
            close(pipe[0])
            throw .couldNotRun(program: program, errno: Errno(rawValue: spawned))
        }
        return Running(program: program, pid: pid, output: pipe[0])
    }

    /// A picker on screen.
    /// Runs the picker and waits for its answer: the path chosen, nil when
    /// the person cancelled (for an unconfined app; the launcher polls `start`'s).
    public func choose(prompt: String) throws(LiveGrantPickerError) -> [UInt8]? {
        let running = try start(prompt: prompt)
        while true {
            var ready = pollfd(fd: running.descriptor, events: Int16(POLLIN), revents: 0)
            if poll(&ready, 1, -1) < 0 && errno != EINTR { running.abandon(); return nil }
            if let answer = running.advance() { return try answer.get() }
        }
    }

    public final class Running: @unchecked Sendable {
        let program: String
        let pid: pid_t
        private var output: CInt
        private var printed: [UInt8] = []

        init(program: String, pid: pid_t, output: CInt) {
            self.program = program
            self.pid = pid
            self.output = output
        }

        deinit { abandon() }

        /// The picker's stdout, to poll.
        public var descriptor: CInt { output }

        /// Reads what the picker printed; once it closed its output (or
        /// printed too much), reaps it and gives the path, or nil when the
        /// person cancelled.
        public func advance() -> Result<[UInt8]?, LiveGrantPickerError>? {
            guard output >= 0 else { return .success(nil) }
            var chunk = [UInt8](repeating: 0, count: 1024)
            while printed.count <= AskpassPicker.outputLimit {
                let got = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
                if got < 0 && errno == EINTR { continue }
                if got < 0 && errno == EAGAIN { return nil }
                if got <= 0 { break }
                printed += chunk[..<got]
            }
            close(output)
            output = -1  // a picker still writing gets SIGPIPE
            var status: CInt = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            guard Termination(waitStatus: status) == .exited(0) else { return .success(nil) }
            guard printed.count <= AskpassPicker.outputLimit, printed.last == UInt8(ascii: "\n"),
                  printed.filter({ $0 == UInt8(ascii: "\n") }).count == 1, !printed.contains(0), printed.count > 1 else {
                return .failure(.badOutput(program: program))
            }
            return .success(Array(printed.dropLast()))
        }

        /// The sandbox ended first: the picker is ended (TERM, then KILL after a second) and reaped.
        public func abandon() {
            guard output >= 0 else { return }
            close(output)
            output = -1
            kill(pid, SIGTERM)
            var status: CInt = 0
            for _ in 0..<100 {
                let reaped = waitpid(pid, &status, WNOHANG)
                if reaped > 0 || (reaped < 0 && errno != EINTR) { return }
                usleep(10_000)
            }
            kill(pid, SIGKILL)
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
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
final class LiveGrantService: @unchecked Sendable {
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
        /// The folder attached (held open: its inode names the watches to remove when it goes).
        var folder: OwnedDescriptor? = nil
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
    /// The launch's broker over the state, made at first need and kept: one
    /// connection to the ledger for the whole run (opening one writes
    /// SQLite's shared-memory file, which would wake the watch again).
    private var ledger: GrantBroker?
    private var lastCheck = 0.0
    /// The backstop: the ledger is read this often (seconds) even without news of a change.
    public static let recheckInterval = 1.0
    /// When `serve` was called, and how long a sandbox with only launch-time grants runs before its ledger is watched (seconds).
    private var servedAt = LiveGrantService.now()
    static let watchAfter = 0.05
    /// When to read the ledger again after news of a change (seconds, monotonic).
    private var followUps: [Double] = []
    /// Ledger checks made so far (for tests and benchmarks).
    public private(set) var checks = 0

    init(session: SandboxSession, app: AppID, policy: Policy, picker: AskpassPicker?, registration: SandboxRegistration? = nil, broker: GrantBroker? = nil) {
        self.session = session
        self.app = app
        self.policy = policy
        self.picker = picker
        self.registration = registration
        ledger = broker
    }

    /// The launch's broker (see `ledger`).
    private func broker() throws(GrantError) -> GrantBroker {
        if let ledger { return ledger }
        let opened = try session.broker()
        ledger = opened
        return opened
    }

    deinit {
        if inotify >= 0 { close(inotify) }
    }

    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// The sandbox's revocable grants (its launch-time grants' mounts).
    private var running: RunningGrants?
    /// The launch-time grants by name, and the grant each is given under.
    private var launchGrants: [String: GrantID] = [:]

    /// Serves `process`'s broker requests (when it has a broker) and, while
    /// folders attached at run time or launch-time grants with mounts of
    /// their own are in the view, watches the ledger to take away those
    /// revoked. The process holds this service only weakly (its owner,
    /// `RunningSandbox`, holds it): nothing outlives the sandbox.
    func serve(_ process: ConfinedProcess, launchGrants: [String: GrantID] = [:]) {
        process.liveGrants?.handler = { [weak self] request, context in
            self?.handle(request, context: context)
                ?? .reply(LiveGrantReply(status: .unavailable, message: "the launcher no longer serves this sandbox"))
        }
        running = process.running
        self.launchGrants = launchGrants
        servedAt = Self.now()
        running?.watch = { [weak self] in self?.watch() }
        running?.recheck = { [weak self] in self?.recheck() }
    }

    /// The sandbox ended: the watch and the broker go now, not when the last reference does.
    func finish() {
        stopWatching()
        attached = [:]
        running = nil
    }

    /// Launch-time grants whose mounts are still in the view, with their grants.
    private var watchedLaunchGrants: [(name: String, grant: GrantID)] {
        (running?.launchGrants ?? []).compactMap { name in launchGrants[name].map { (name, $0) } }
    }

    func handle(_ request: LiveGrantRequest, context: LiveGrantContext) -> LiveGrantOutcome {
        switch request.operation {
        case .openPanel: openPanel(request, context: context)
        case .startAccessing: .reply(startAccessing(request.payload, area: context.area))
        case .stopAccessing: .reply(stopAccessing(request.payload))
        }
    }

    private func openPanel(_ request: LiveGrantRequest, context: LiveGrantContext) -> LiveGrantOutcome {
        guard policy.userSelectedAccess != nil else {
            return .reply(LiveGrantReply(status: .unavailable, message: "policy \(policy.source) takes no user-selected folders"))
        }
        guard picker != nil || context.terminal?.available == true else {
            return .reply(LiveGrantReply(status: .noPicker, message: "nobody to ask: the sandbox was started without a picker "
                + "(run --picker PROGRAM) and the launcher reads no terminal (run it in a terminal's foreground)"))
        }
        guard let area = context.area else {
            return .reply(LiveGrantReply(status: .unavailable, message: "live grants need the private view; this sandbox runs in the host view"))
        }
        guard !request.wantsBookmark || policy.bookmarksAppScope else {
            return .reply(LiveGrantReply(status: .unavailable, message: "policy \(policy.source) keeps no bookmarks (\(Policy.bookmarksAppScopeKey))"))
        }
        guard attached.count < Self.maximumAttached else {
            return .reply(LiveGrantReply(status: .busy, message: "this sandbox holds \(Self.maximumAttached) folders already"))
        }
        let now = Self.now()
        guard now >= quietUntil else {
            return .reply(LiveGrantReply(status: .busy, message: "the person cancelled \(cancelsInARow) prompts in a row: "
                + "not asked again for \(Int((quietUntil - now).rounded(.up))) s"))
        }
        tokens = min(Self.burst, tokens + max(0, now - last) * Self.perSecond)
        last = now
        guard tokens >= 1 else { return .reply(LiveGrantReply(status: .busy, message: "too many requests: the person is not asked again yet")) }
        tokens -= 1
        let access: GrantAccess = request.readOnly || policy.userSelectedAccess != .readWrite ? .readOnly : .readWrite
        let asked = Printable.path(String(decoding: request.payload, as: UTF8.self), limit: AskpassPicker.promptLimit)
        if let picker {
            let prompt = "\(app) asks for a folder (\(access.rawValue))" + (asked.isEmpty ? "" : ": " + asked)
            do {
                let running = try picker.start(prompt: prompt)
                return .asking(PickerQuestion(running: running) { answer in
                    switch answer {
                    case .success(let chosen):
                        guard let chosen else { return self.chosenPath(nil, request: request, access: access, area: area).reply }
                        let path = FilePath(bytes: chosen)
                        guard path.isAbsolute else {
                            self.last = Self.now()
                            return LiveGrantReply(status: .refused, message: "\(LiveGrantPickerError.notAbsolute)")
                        }
                        return self.chosenPath(path, request: request, access: access, area: area).reply
                    case .failure(let error):
                        self.last = Self.now()
                        return LiveGrantReply(status: .refused, message: "\(error)")
                    }
                })
            } catch {
                last = Self.now()
                return .reply(LiveGrantReply(status: .refused, message: "\(error)"))
            }
        }
        guard let terminal = context.terminal?.take() else {
            return .reply(LiveGrantReply(status: .noPicker, message: "nobody to ask: the terminal could not be taken from the command"))
        }
        // The app's own words are quoted on a line of their own, escaped (in ASCII, its quotes too), and cut
        // to fit: they cannot pass for the launcher's, nor wrap onto lines that carry its mark.
        let title = ["\(app) asks for a folder, \(FolderBrowser.describe(access))."]
        let words = request.payload.isEmpty ? nil : FolderBrowser.appWords(String(decoding: request.payload, as: UTF8.self))
        // The browser starts in the launcher's folder, as pick does.
        let start = Self.currentDirectory() ?? FilePath(session.environment["HOME"] ?? "/")
        guard let origin = (try? OwnedDescriptor.openFolder(start, follow: true)) ?? (try? OwnedDescriptor.openFolder(FilePath("/"), follow: false)) else {
            terminal.close()
            return .reply(LiveGrantReply(status: .refused, message: "no folder to start browsing from"))
        }
        let browser = FolderBrowser(title: title, words: words, access: access, startingAt: origin)
        return .asking(BrowserQuestion(session: terminal, browser: browser) { chosen in
            self.chosen(chosen, request: request, access: access, area: area)
        })
    }

    static func currentDirectory() -> FilePath? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return nil }
        // As bytes: a folder name need not be UTF-8.
        return buffer.withUnsafeBufferPointer { FilePath(platformString: $0.baseAddress!) }
    }

    /// A path a picker program printed: walked as `pick --select` walks
    /// it (links an app could have planted are refused), then granted.
    private func chosenPath(_ path: FilePath?, request: LiveGrantRequest, access: GrantAccess, area: LiveGrantArea) -> (reply: LiveGrantReply, lines: [String]) {
        guard let path else { return chosen(nil, request: request, access: access, area: area) }
        do {
            guard path.isAbsolute else { throw LiveGrantPickerError.notAbsolute }
            let folder = try session.folder(path) { problem in GrantError.bookmarkFile(path: Printable.path(path), problem: problem) }
            return chosen(FolderBrowser.Chosen(folder: folder, path: path), request: request, access: access, area: area)
        } catch {
            last = Self.now()
            cancelsInARow = 0
            return (LiveGrantReply(status: .refused, message: "\(error)"), ["Refused: \(Printable.message("\(error)"))"])
        }
    }

    /// The person's answer: nil cancelled. Grants the folder chosen (held
    /// open since it was shown), and says what happened in lines for the terminal.
    private func chosen(_ chosen: FolderBrowser.Chosen?, request: LiveGrantRequest, access: GrantAccess, area: LiveGrantArea) -> (reply: LiveGrantReply, lines: [String]) {
        // The person's pause starts when the picker closes.
        defer { last = Self.now() }
        guard let chosen else {
            cancelsInARow += 1
            if cancelsInARow >= Self.cancelsBeforePause {
                let doublings = Double(min(cancelsInARow - Self.cancelsBeforePause, 16))
                quietUntil = Self.now() + min(Self.longestPause, Self.firstPause * pow(2, doublings))
            }
            return (LiveGrantReply(status: .cancelled, message: "the person chose no folder"), ["Cancelled: nothing granted."])
        }
        cancelsInARow = 0
        let folder = chosen.folder, path = chosen.path
        do {
            var reached: FilePath?
            let issued = try broker().grant(app: app, opened: folder, access: access) { _ in
                reached = try area.attach(folder, writable: access == .readWrite)
            }
            guard let reached else { return (LiveGrantReply(status: .refused, message: "the folder was not attached"), ["Refused: the folder was not attached."]) }
            self.area = area
            attached[issued.id] = Attached(path: reached, folder: folder, starts: 0, pinned: true)
            try record(issued.id, path: issued.path)
            // Where the folder is, links resolved: what a picker program printed may have led elsewhere.
            let actual = folder.currentPath ?? path
            var lines = ["Granted \(Printable.path(actual)) (\(access.rawValue)) to \(app)."]
            if actual != path.lexicallyNormalized() { lines.append("\(Printable.path(path)) leads there.") }
            return (LiveGrantReply(status: .granted, text: reached.bytes, bookmark: request.wantsBookmark ? issued.bookmark : nil), lines)
        } catch {
            return (LiveGrantReply(status: .refused, message: "\(error)"), ["Refused: \(Printable.message("\(error)"))"])
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
            let broker = try broker()
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
            attached[grant.id] = Attached(path: reached, folder: folder, starts: 1, pinned: false)
            try record(grant.id, path: path)
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
        do { id = try broker().grantID(of: blob, app: app) } catch {
            return LiveGrantReply(status: .refused, message: "\(error)")
        }
        guard let id else { return LiveGrantReply(status: .invalid, message: "not a bookmark of \(app)") }
        guard var entry = attached[id], entry.starts > 0 else {
            return LiveGrantReply(status: .notAccessing, message: "this sandbox is not accessing that bookmark's folder")
        }
        if entry.starts == 1 && !entry.pinned {
            // The last stop: the folder goes only if nothing in the sandbox
            // holds it, since a folder detached under a held descriptor would
            // still show its names and attributes. Held: it stays, started.
            do { try detach(id) } catch .held {
                return LiveGrantReply(status: .busy, message: "the folder is still in use in this sandbox (a descriptor or working directory "
                    + "in it, or a file open there): close those, then stop accessing it; it stays attached meanwhile")
            } catch {
                return LiveGrantReply(status: .refused, message: "\(error)")
            }
            return LiveGrantReply(status: .granted, text: entry.path.bytes)
        }
        entry.starts -= 1
        attached[id] = entry
        return LiveGrantReply(status: .granted, text: entry.path.bytes)
    }

    /// Records an attached folder in the sandbox's record, or takes it away
    /// again: a folder `grants revoke` could not name would let it return 0
    /// while the command still reaches the folder (fail closed).
    private func record(_ id: GrantID, path: FilePath) throws {
        do { try registration?.attached(id, path: path) } catch {
            try? detach(id)
            throw error
        }
    }

    /// Takes the folder of `id` away, if nothing in the sandbox holds it
    /// (`.held`: it stays attached; a revocation then ends the sandbox).
    private func detach(_ id: GrantID) throws(LiveGrantAreaError) {
        guard let entry = attached[id] else { return }
        guard let area else { throw .notAttachable("no grant area") }
        try area.detach(entry.path)
        attached[id] = nil
        try? registration?.detached(id)
        // A watch the command put there would go on telling it of changes.
        if let folder = entry.folder, running?.forgetWatches(of: folder) == false {
            throw .watchesRemain
        }
    }

    // MARK: Revocation

    /// What the launcher's wait loop polls while folders are attached.
    func watch() -> (descriptor: CInt?, timeout: CInt)? {
        guard !attached.isEmpty || !watchedLaunchGrants.isEmpty else { return nil }
        let now = Self.now()
        // Launch-time grants only: the watch starts once the command has run
        // `watchAfter` (closing an inotify instance waits for an SRCU grace
        // period, some 13 ms here, which a short command would pay at its
        // exit), with a check of the ledger then for what came before.
        if inotify < 0, attached.isEmpty, now < servedAt + Self.watchAfter {
            return (nil, CInt((servedAt + Self.watchAfter - now) * 1000) + 1)
        }
        if inotify < 0 {
            startWatching()
            followUps.insert(now, at: 0)
        }
        let remaining = max(0, min(lastCheck + Self.recheckInterval, followUps.first ?? .infinity) - now)
        return (inotify >= 0 ? inotify : nil, CInt(remaining * 1000) + 1)
    }

    private func startWatching() {
        guard let broker = try? broker() else { return }
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
        guard !attached.isEmpty || !watchedLaunchGrants.isEmpty else { return }
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
        let now = Self.now()
        // A write to the ledger's journal wakes us before its commit can be
        // read (it shows through the shared memory, which sends no event):
        // read again shortly after, and once more a little later.
        if changed { followUps = [now + 0.005, now + 0.05] }
        let followUpDue = followUps.first.map { now >= $0 } ?? false
        if followUpDue { followUps.removeFirst() }
        guard changed || followUpDue || now >= lastCheck + Self.recheckInterval else { return }
        check()
    }

    func check() {
        checks += 1
        let launch = watchedLaunchGrants
        let ids = Array(attached.keys) + launch.map(\.grant)
        // Read again through a new connection once before concluding the ledger cannot be read.
        var live = try? broker().liveness(of: ids)
        if live == nil {
            ledger = nil
            live = try? broker().liveness(of: ids)
        }
        let known = live ?? [:]
        // Fail closed: a revoked folder that cannot be taken away ends the sandbox.
        // A folder the command still holds is not detached under it: the
        // sandbox ends, and its record (still naming the grant) with it.
        for id in Array(attached.keys) where known[id] != true {
            do { try detach(id) } catch {
                endSandbox(error, "taking away the revoked \(attached[id]?.path.string ?? "folder")")
            }
        }
        // A launch-time grant's mount goes once every grant it holds is revoked.
        let revoked = Set(launch.filter { known[$0.grant] != true }.map(\.name))
        if !revoked.isEmpty {
            do {
                for name in try running?.detachLaunchGrants(revoked) ?? [] {
                    if let id = launchGrants[name] { try? registration?.detached(id) }
                }
            } catch {
                endSandbox(error, "detaching the launch-time grant \(revoked.sorted().joined(separator: ", "))")
            }
        }
        lastCheck = Self.now()
    }

    /// A revoked folder could not be taken away: the record says why (for
    /// `grants revoke` to report), then the sandbox is ended (fail closed).
    private func endSandbox(_ error: LiveGrantAreaError, _ step: String) {
        registration?.ending(error == .held ? .held : .failed("\(step): \(error)"))
        running?.revocationFailed("\(step): \(error)")
    }
}

/// A picker program on screen, waited for by the launcher's loop.
final class PickerQuestion: LiveGrantQuestion {
    let running: AskpassPicker.Running
    let answered: (Result<[UInt8]?, LiveGrantPickerError>) -> LiveGrantReply

    init(running: AskpassPicker.Running, answered: @escaping (Result<[UInt8]?, LiveGrantPickerError>) -> LiveGrantReply) {
        self.running = running
        self.answered = answered
    }

    var descriptor: CInt? { running.descriptor }
    var timeout: CInt { -1 }
    func advance(ready: Bool) -> LiveGrantReply? { ready ? running.advance().map(answered) : nil }
    func abandon() { running.abandon() }
}

/// The folder browser on the person's terminal, waited for by the
/// launcher's loop: the same browser, with the same keys, as `pick`.
/// It is drawn at once, takes keys only after `LiveGrantTerminalSession.settle`
/// (what was typed before is dropped: the command may time its question to
/// appear while the person types to it), and every line carries the launcher's mark.
final class BrowserQuestion: LiveGrantQuestion {
    let session: LiveGrantTerminalSession
    private var browser: FolderBrowser
    private var painter: FolderBrowser.Painter
    private var keys: FolderBrowser.Keys
    /// When the question takes keys.
    let takesKeysAt: Double
    private var asked = false
    /// When an incomplete escape sequence becomes a lone Esc.
    private var escapeDue: Double?
    /// The folder chosen (nil: cancelled), granted: the reply and what to show.
    let answered: (FolderBrowser.Chosen?) -> (reply: LiveGrantReply, lines: [String])

    init(session: LiveGrantTerminalSession, browser: FolderBrowser,
         answered: @escaping (FolderBrowser.Chosen?) -> (reply: LiveGrantReply, lines: [String])) {
        self.session = session
        self.browser = browser
        let mark = LiveGrantTerminalSession.lineMark
        painter = FolderBrowser.Painter(prefix: mark.text, prefixWidth: mark.width)
        keys = FolderBrowser.Keys(interrupt: session.interruptKey)
        takesKeysAt = LiveGrantService.now() + Double(LiveGrantTerminalSession.settle) / 1000
        self.answered = answered
        self.browser.takesKeys = false
        paint()
    }

    /// The size the last frame was drawn for: a resize wakes the launcher's loop, and the frame is drawn again.
    private var paintedFor: (width: Int, height: Int) = (0, 0)

    private func paint() {
        let size = session.size
        paintedFor = size
        session.draw(painter.paint(browser.frame(width: size.width - painter.prefixWidth - 1, height: size.height)))
    }

    var descriptor: CInt? { asked ? session.input : nil }
    var timeout: CInt {
        let due = asked ? escapeDue : takesKeysAt
        guard let due else { return -1 }
        return CInt(max(0, (due - LiveGrantService.now()) * 1000).rounded(.up))
    }

    func advance(ready: Bool) -> LiveGrantReply? {
        if !asked {
            guard LiveGrantService.now() >= takesKeysAt else { return nil }
            asked = true
            session.browse()
            browser.takesKeys = true
            paint()
            return nil
        }
        var pressed: [FolderBrowser.Key] = []
        if ready {
            guard let bytes = session.readBytes() else { return finish(nil) }  // the terminal hung up
            pressed = keys.feed(bytes)
        }
        if keys.waiting {
            if escapeDue == nil { escapeDue = LiveGrantService.now() + Double(FolderBrowser.Keys.escapeWait) / 1000 }
            if !ready, let due = escapeDue, LiveGrantService.now() >= due { pressed += keys.flush() }
        }
        if !keys.waiting { escapeDue = nil }
        if pressed.isEmpty, session.size != paintedFor { paint() }
        // One key at a time, each on the frame it was typed at.
        for key in pressed {
            switch browser.handle(key) {
            case .chosen(let chosen): return finish(chosen)
            case .cancelled: return finish(nil)
            case .browsing: paint()
            }
        }
        return nil
    }

    private func finish(_ chosen: FolderBrowser.Chosen?) -> LiveGrantReply {
        session.draw(painter.finish())
        let outcome = answered(chosen)
        session.show(outcome.lines.map(browser.show))
        session.close()
        return outcome.reply
    }

    func abandon() {
        session.draw(painter.finish())
        session.show(["The sandbox ended: nothing granted."])
        session.close(commandEnded: true)
    }
}

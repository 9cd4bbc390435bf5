@preconcurrency import Glibc
import Grants
import Sandbox
import SystemPackage
import Synchronization

/// Where a process gets its security-scoped folders, as an app sees Apple's
/// Powerbox: one API whether or not the app runs in a sandbox.
/// - Inside a sandbox (the launcher's marks in the environment), every
///   request goes to the launcher's broker over the inherited socket named by
///   `SANDBOXED_RUN_BROKER_FD` (docs/live-grants.md): the person answers an
///   open panel outside the sandbox, the broker resolves bookmarks for the
///   sandbox's app and attaches their folders. Nothing the app names as a
///   path is ever sent. A variable that does not name a `SOCK_SEQPACKET`
///   unix socket, or a sandbox without the variable, is an error: never a
///   fallback to a ledger of the app's own.
/// - Outside, the local broker (the session's ledger) grants and resolves for
///   `app`, and an open panel asks through `picker`.
/// Not Sendable: the local broker's ledger connection is single-threaded.
public final class SecurityScope {
    enum Backend {
        case sandboxed(LiveGrantConnection)
        case local(session: SandboxSession, app: AppID, picker: AskpassPicker?)
    }
    let backend: Backend
    private var localBroker: GrantBroker?

    /// Variables the launcher sets in every sandbox: any of them means the
    /// process runs in one, where only the broker may be asked.
    public static let sandboxMarks = [ConfinementPlan.brokerVariable, "SANDBOX_CONTAINER", "SANDBOX_APP_ID"]

    init(_ backend: Backend) {
        self.backend = backend
    }

    /// The scope of this process, from `environment` (the process's own by
    /// default): the broker inside a sandbox, else the local ledger of `app`,
    /// whose open panels ask through `picker`. Inside a sandbox `app` and
    /// `picker` are not used: the sandbox's app and the launcher's picker count.
    public static func current(
        app: AppID, picker: AskpassPicker? = nil, environment: [String: String] = processEnvironment()
    ) throws(SecurityScopeError) -> SecurityScope {
        if sandboxMarks.contains(where: { environment[$0] != nil }) { return try sandboxed(environment: environment) }
        do { return SecurityScope(.local(session: try SandboxSession(environment: environment), app: app, picker: picker)) } catch {
            throw .noSession(error.description)
        }
    }

    /// The broker of the sandbox this process runs in: `.noBroker` without
    /// `SANDBOXED_RUN_BROKER_FD`, `.notABroker` when it names anything but a
    /// `SOCK_SEQPACKET` unix socket.
    public static func sandboxed(environment: [String: String] = processEnvironment()) throws(SecurityScopeError) -> SecurityScope {
        guard let value = environment[ConfinementPlan.brokerVariable] else { throw .noBroker }
        guard !value.isEmpty, value.utf8.count <= 9, value.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let fd = CInt(value), fd > 2 else {
            throw .notABroker("\(ConfinementPlan.brokerVariable)=\(Printable.message(value)) is not a descriptor number above 2")
        }
        return SecurityScope(.sandboxed(try LiveGrantConnection(checking: fd)))
    }

    /// The local ledger of `session`, whatever the environment says.
    public static func local(session: SandboxSession, app: AppID, picker: AskpassPicker? = nil) -> SecurityScope {
        SecurityScope(.local(session: session, app: app, picker: picker))
    }

    /// Whether requests go to a sandbox's broker.
    public var isSandboxed: Bool {
        if case .sandboxed = backend { return true }
        return false
    }

    /// The process's environment, read once.
    public static func processEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let pair = String(cString: pointer)
            if let equals = pair.firstIndex(of: "="), result[String(pair[..<equals])] == nil {
                result[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
            }
            entry += 1
        }
        return result
    }

    func broker() throws(SecurityScopeError) -> GrantBroker {
        guard case .local(let session, _, _) = backend else { throw .notLocal }
        if let localBroker { return localBroker }
        do {
            let broker = try session.broker()
            localBroker = broker
            return broker
        } catch { throw .refused(error.description) }
    }

    // MARK: Bookmarks

    /// As `URL(resolvingBookmarkData:options:relativeTo:bookmarkDataIsStale:)`:
    /// the folder of a bookmark of this app, or `.unresolved` with `resolve`'s
    /// outcome (replaced, missing, revoked, wrong-app, invalid, covered,
    /// inaccessible). A moved folder resolves with `isStale` set and
    /// `bookmarkData()` giving the renewed data: save it in place of the old.
    /// Inside a sandbox the broker resolves it (a start and a stop): its
    /// folder is reachable only between `startAccessingSecurityScopedResource`
    /// and the last stop, at the `path` the start sets.
    public func url(resolvingBookmarkData data: [UInt8], bookmarkDataIsStale isStale: inout Bool) throws(SecurityScopeError) -> SecurityScopedURL {
        switch backend {
        case .sandboxed(let connection):
            let started = try startAccessing(bookmarkData: data)
            let current = started.renewedBookmarkData ?? data
            try connection.stop(current)
            isStale = started.renewedBookmarkData != nil
            return SecurityScopedURL(path: started.path, access: nil, bookmark: current, backend: .sandboxed(connection))
        case .local(_, let app, _):
            let broker = try broker()
            let resolution: BookmarkResolution
            do { resolution = try broker.resolve(data, app: app) } catch { throw .refused(error.description) }
            guard let folder = resolution.folder, let path = resolution.currentPath, let access = resolution.access else {
                throw .unresolved(resolution.status, resolution.message)
            }
            var current = data
            if resolution.isStale {
                do { current = try broker.renew(resolution, app: app) } catch { throw .refused(error.description) }
            }
            isStale = resolution.isStale
            return SecurityScopedURL(path: path, access: access, bookmark: current, backend: .local(folder: folder, grantID: resolution.grant?.id, broker: broker))
        }
    }

    /// One start of a bookmark's folder, as `$SANDBOXED_RUN start-accessing`:
    /// where it is reached now, and renewed data when the folder moved (the
    /// caller saves it). Inside a sandbox the broker counts starts per
    /// sandbox; `stopAccessing(bookmarkData:)` ends one.
    public func startAccessing(bookmarkData data: [UInt8]) throws(SecurityScopeError) -> StartedAccess {
        switch backend {
        case .sandboxed(let connection):
            guard !data.isEmpty, data.count <= LiveGrantRequest.maximumBookmark else {
                throw .unresolved(.invalid, "this is not a bookmark (\(data.count) bytes)")
            }
            let reply = try connection.ask(LiveGrantRequest(operation: .startAccessing, payload: data))
            return StartedAccess(path: FilePath(bytes: reply.text), renewedBookmarkData: reply.bookmark)
        case .local:
            var isStale = false
            let url = try url(resolvingBookmarkData: data, bookmarkDataIsStale: &isStale)
            return StartedAccess(path: url.path, renewedBookmarkData: isStale ? url.bookmark : nil)
        }
    }

    /// Ends one start of a bookmark's folder; inside a sandbox, at the last
    /// the folder is unreachable again (descriptors already open keep working).
    /// Outside, nothing confines the process: only the bookmark is checked.
    public func stopAccessing(bookmarkData data: [UInt8]) throws(SecurityScopeError) {
        switch backend {
        case .sandboxed(let connection):
            guard !data.isEmpty, data.count <= LiveGrantRequest.maximumBookmark else {
                throw .unresolved(.invalid, "this is not a bookmark (\(data.count) bytes)")
            }
            try connection.stop(data)
        case .local(_, let app, _):
            guard try broker().grantID(of: data, app: app) != nil else { throw .unresolved(.invalid, "not a bookmark of \(app)") }
        }
    }

    /// As `URL.bookmarkData(withContentsOf:)`: a bookmark file's bytes. Inside
    /// a sandbox every link is followed (the process reaches only what it
    /// may); outside, none an app could have planted (`SandboxSession.linkTrust`).
    public func bookmarkData(withContentsOf path: String) throws(SecurityScopeError) -> [UInt8] {
        let bytes: [UInt8]?
        do { bytes = try bookmarkFile(path).read() } catch { throw .file(error.description) }
        guard let bytes else { throw .noSuchFile(Printable.message(path)) }
        return bytes
    }

    /// As `URL.writeBookmarkData(_:to:)`: replaced atomically, and synced.
    public func writeBookmarkData(_ data: [UInt8], to path: String) throws(SecurityScopeError) {
        do { try bookmarkFile(path).replace(with: data) } catch { throw .file(error.description) }
    }

    private func bookmarkFile(_ path: String) throws(GrantError) -> BookmarkFile {
        switch backend {
        case .sandboxed: try BookmarkFile(path: path, trust: .everyLink())
        case .local(let session, _, _): try BookmarkFile(path: path, trust: session.linkTrust())
        }
    }

    // MARK: The open panel

    /// Asks the person for a folder (see `OpenPanel`); nil when they cancelled.
    func choose(message: String, readOnly: Bool, createsBookmark: Bool) throws(SecurityScopeError) -> SecurityScopedURL? {
        let prompt = Array(message.utf8.prefix(LiveGrantRequest.maximumPrompt))
        switch backend {
        case .sandboxed(let connection):
            let request = LiveGrantRequest(operation: .openPanel, readOnly: readOnly, wantsBookmark: createsBookmark, payload: prompt)
            let reply: LiveGrantReply
            do { reply = try connection.ask(request) } catch .cancelled { return nil }
            if createsBookmark && reply.bookmark == nil { throw .malformedReply("the broker sent no bookmark") }
            return SecurityScopedURL(path: FilePath(bytes: reply.text), access: readOnly ? .readOnly : nil, bookmark: reply.bookmark,
                                     backend: .sandboxed(connection), pinned: true)
        case .local(let session, let app, let picker):
            guard let picker else { throw .noPicker("nobody to ask: no picker was given to ask the person with") }
            let access: GrantAccess = readOnly ? .readOnly : .readWrite
            let asked = Printable.path(String(decoding: prompt, as: UTF8.self), limit: AskpassPicker.promptLimit)
            let chosen: [UInt8]?
            do { chosen = try picker.choose(prompt: "\(app) asks for a folder (\(access.rawValue))" + (asked.isEmpty ? "" : ": " + asked)) } catch {
                throw .refused(error.description)
            }
            guard let chosen else { return nil }
            let path = FilePath(bytes: chosen)
            guard path.isAbsolute else { throw .refused(LiveGrantPickerError.notAbsolute.description) }
            let broker = try broker()
            do {
                let folder = try session.folder(path) { problem in GrantError.bookmarkFile(path: Printable.path(path), problem: problem) }
                let issued = try broker.grant(app: app, opened: folder, access: access) { _ in }
                return SecurityScopedURL(path: issued.path, access: access, bookmark: createsBookmark ? issued.bookmark : nil,
                                         backend: .local(folder: folder, grantID: issued.id, broker: broker))
            } catch { throw .refused("\(error)") }
        }
    }
}

/// Where a started bookmark's folder is reached, and its renewed data when it moved.
public struct StartedAccess: Sendable {
    public let path: FilePath
    /// The bookmark renewed (the folder moved, or an older key sealed it): save it in place of the old.
    public let renewedBookmarkData: [UInt8]?
}

/// As `NSOpenPanel` choosing one folder: the person answers outside the app
/// (the launcher's picker inside a sandbox, `picker` outside). The folder
/// stays reachable for as long as the sandbox runs, as NSOpenPanel's URLs do.
public final class OpenPanel {
    let scope: SecurityScope
    /// Text the picker shows (escaped, and cut to 200 characters).
    public var message = ""
    /// Ask for read-only access; a policy with only `user-selected.read-only` gives that anyway.
    public var readOnly = false
    /// The chosen URL carries bookmark data (`bookmarkData()`); inside a
    /// sandbox the policy needs `com.apple.security.files.bookmarks.app-scope`.
    public var createsBookmark = false
    /// The folder chosen by the last `runModal`.
    public private(set) var url: SecurityScopedURL?

    public init(scope: SecurityScope) {
        self.scope = scope
    }

    /// Asks the person; the folder, or nil when they cancelled.
    @discardableResult
    public func runModal() throws(SecurityScopeError) -> SecurityScopedURL? {
        url = try scope.choose(message: message, readOnly: readOnly, createsBookmark: createsBookmark)
        return url
    }
}

/// A granted folder, as Apple's security-scoped `URL`: bracket its use with
/// start and stop accessing. Calls nest; inside a sandbox each start and
/// each stop (up to the number of starts) is the broker's, and the folder is
/// unreachable again after the last stop. Outside, the folder stays pinned
/// (its verified descriptor open) and `startAccessing` returns false once
/// the grant was revoked. `outstandingAccesses` shows leaked starts.
/// Not Sendable: it keeps its scope's broker, whose ledger connection is single-threaded.
public final class SecurityScopedURL {
    enum Backend {
        case local(folder: OwnedDescriptor, grantID: GrantID?, broker: GrantBroker)
        case sandboxed(LiveGrantConnection)
    }
    /// Where the folder is reached: its host path outside; inside a sandbox
    /// beneath /run/sandboxed-run/grants, as the last start set it.
    public private(set) var path: FilePath
    /// The access granted, where known (inside a sandbox the policy may cap it further).
    public let access: GrantAccess?
    /// The newest bookmark data: renewed when the folder moved.
    private(set) var bookmark: [UInt8]?
    let backend: Backend
    /// An open panel's folder: reachable for the run, starts or not.
    let pinned: Bool
    private let count = Mutex(0)
    /// Why the last start failed, for `startAccessingSecurityScopedResource`'s false.
    public private(set) var lastError: SecurityScopeError?

    init(path: FilePath, access: GrantAccess?, bookmark: [UInt8]?, backend: Backend, pinned: Bool = false) {
        self.path = path
        self.access = access
        self.bookmark = bookmark
        self.backend = backend
        self.pinned = pinned
    }

    /// As `url.bookmarkData(options: .withSecurityScope)`: the bookmark of
    /// this folder (renewed when it moved), sealed for the app.
    public func bookmarkData() throws(SecurityScopeError) -> [UInt8] {
        guard let bookmark else { throw .noBookmark }
        return bookmark
    }

    /// Returns false when the folder cannot be reached (revoked, moved
    /// elsewhere, the broker refused); `lastError` says why.
    public func startAccessingSecurityScopedResource() -> Bool {
        do {
            try startAccessing()
            return true
        } catch {
            lastError = error
            return false
        }
    }

    /// As `startAccessingSecurityScopedResource`, with the reason it failed.
    public func startAccessing() throws(SecurityScopeError) {
        switch backend {
        case .local(_, let grantID, let broker):
            if let grantID {
                let live: Bool
                do { live = try broker.liveness(of: [grantID])[grantID] ?? false } catch { throw .refused(error.description) }
                guard live else { throw .unresolved(.revoked, "access to \(path) was revoked") }
            }
        case .sandboxed(let connection):
            // An open panel's folder without a bookmark stays attached for the run.
            if let bookmark {
                let reply = try connection.ask(LiveGrantRequest(operation: .startAccessing, payload: bookmark))
                path = FilePath(bytes: reply.text)
                if let renewed = reply.bookmark { self.bookmark = renewed }
            }
        }
        count.withLock { $0 += 1 }
    }

    public func stopAccessingSecurityScopedResource() {
        try? stopAccessing()
    }

    /// As `stopAccessingSecurityScopedResource`; a stop beyond the starts does nothing.
    public func stopAccessing() throws(SecurityScopeError) {
        guard count.withLock({ (count: inout Int) -> Bool in
            guard count > 0 else { return false }
            count -= 1
            return true
        }) else { return }
        if case .sandboxed(let connection) = backend, let bookmark { try connection.stop(bookmark) }
    }

    public var outstandingAccesses: Int { count.withLock { $0 } }
}

/// Printed as its path, as Foundation's URL prints itself; never as the type's name.
extension SecurityScopedURL: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String { path.string }
    public var debugDescription: String { "SecurityScopedURL(\(path.string))" }
}

/// Why a security-scoped request failed.
public enum SecurityScopeError: Error, Equatable, CustomStringConvertible, Sendable {
    /// In a sandbox without the broker's descriptor (a policy without the keys).
    case noBroker
    /// `SANDBOXED_RUN_BROKER_FD` names no broker socket: nothing was sent.
    case notABroker(String)
    /// Outside a sandbox, no state and container location could be found.
    case noSession(String)
    /// The broker could not be asked, or sent what is no reply.
    case brokerGone(Errno)
    case malformedReply(String)
    /// The broker's answers (docs/live-grants.md): its message.
    case cancelled
    case noPicker(String)
    case unavailable(String)
    case refused(String)
    case malformedRequest(String)
    case busy(String)
    case notAccessing(String)
    /// The bookmark was not followed: `resolve`'s outcome and its message.
    case unresolved(BookmarkStatus, String)
    /// A URL the open panel gave without `createsBookmark`.
    case noBookmark
    case notLocal
    case noSuchFile(String)
    case file(String)

    public var description: String {
        switch self {
        case .noBroker:
            "live grants are not available here: \(ConfinementPlan.brokerVariable) is not set "
                + "(outside a sandbox, or one whose policy has neither a user-selected key nor com.apple.security.files.bookmarks.app-scope)"
        case .notABroker(let why): why
        case .noSession(let why): why
        case .brokerGone(let error): "the broker did not answer (\(error))"
        case .malformedReply(let why): why
        case .cancelled: "the person chose no folder"
        case .noPicker(let message), .unavailable(let message), .refused(let message), .malformedRequest(let message),
             .busy(let message), .notAccessing(let message), .unresolved(_, let message), .file(let message):
            message
        case .noBookmark: "this URL has no bookmark data: set the open panel's createsBookmark"
        case .notLocal: "this scope is a sandbox's: its broker resolves and grants"
        case .noSuchFile(let path): "\(path) does not exist"
        }
    }
}

/// The inherited broker socket, checked once, one request at a time (a
/// second thread's request waits: replies carry no number).
final class LiveGrantConnection: Sendable {
    let fd: CInt
    private let lock = Mutex(())

    /// Refuses anything but a `SOCK_SEQPACKET` unix socket: bookmark bytes
    /// never go to a pipe, a file or a stream socket someone put in its place.
    /// The message tells a descriptor that is not open (EBADF) from one that
    /// is something else: both mostly mean that a process between the
    /// sandbox's command and this one closed the socket (Python's subprocess
    /// does by default), the second that its number was then reused.
    init(checking fd: CInt) throws(SecurityScopeError) {
        let named = "descriptor \(fd) (\(ConfinementPlan.brokerVariable))"
        let keepItOpen = "Keep it open in every process between the sandbox's command and this one: in Python, "
            + "subprocess.run([...], pass_fds=[int(os.environ[\"\(ConfinementPlan.brokerVariable)\"])]) "
            + "(subprocess closes inherited descriptors by default, close_fds=True); elsewhere, neither close it "
            + "nor mark it close-on-exec before running this."
        var status = stat()
        guard fstat(fd, &status) == 0 else {
            let error = Errno(rawValue: errno)
            guard error == .badFileDescriptor else { throw .notABroker("\(named) cannot be examined (\(error)): nothing was sent") }
            throw .notABroker("\(named) is not open in this process: the broker's socket was closed on the way here. \(keepItOpen)")
        }
        func notABroker(_ what: String) -> SecurityScopeError {
            .notABroker("\(named) is \(what), not a live-grant broker's socket (a SOCK_SEQPACKET unix socket): nothing was sent. "
                + "The broker's socket was probably closed on the way here and its number reused. \(keepItOpen)")
        }
        switch status.st_mode & S_IFMT {
        case S_IFSOCK: break
        case S_IFREG: throw notABroker("a regular file")
        case S_IFDIR: throw notABroker("a folder")
        case S_IFIFO: throw notABroker("a pipe")
        case S_IFCHR: throw notABroker("a character device")
        case S_IFBLK: throw notABroker("a block device")
        default: throw notABroker("neither a file nor a socket")
        }
        var domain: CInt = 0, type: CInt = 0
        var length = socklen_t(MemoryLayout<CInt>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0, domain == AF_UNIX else { throw notABroker("a socket but not a unix one") }
        length = socklen_t(MemoryLayout<CInt>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0, type == CInt(SOCK_SEQPACKET.rawValue) else {
            throw notABroker("a unix socket of another type (stream or datagram)")
        }
        self.fd = fd
    }

    /// The broker's reply when it granted; its refusal as an error.
    func ask(_ request: LiveGrantRequest) throws(SecurityScopeError) -> LiveGrantReply {
        let result = lock.withLock { _ in Result { () throws(LiveGrantClientError) in try LiveGrantClient.send(request, on: fd) } }
        let reply: LiveGrantReply
        switch result {
        case .success(let answer): reply = answer
        case .failure(.brokerGone(let error)): throw .brokerGone(error)
        case .failure(.malformedReply(let why)): throw .malformedReply(why)
        case .failure(.notABroker): throw .notABroker("descriptor \(fd) is no longer a live-grant broker's socket")
        }
        let message = Printable.path(bytes: reply.text)
        switch reply.status {
        case .granted: return reply
        case .cancelled: throw .cancelled
        case .noPicker: throw .noPicker(message)
        case .unavailable: throw .unavailable(message)
        case .refused: throw .refused(message)
        case .malformed: throw .malformedRequest(message)
        case .busy: throw .busy(message)
        case .notAccessing: throw .notAccessing(message)
        case .replaced, .missing, .revoked, .wrongApp, .invalid, .covered, .inaccessible:
            throw .unresolved(BookmarkStatus.allCases.first { $0.exitCode == Int32(reply.status.rawValue) } ?? .invalid, message)
        }
    }

    func stop(_ bookmark: [UInt8]) throws(SecurityScopeError) {
        _ = try ask(LiveGrantRequest(operation: .stopAccessing, payload: bookmark))
    }
}

extension GrantBroker {
    /// As `URL(resolvingBookmarkData:options:relativeTo:bookmarkDataIsStale:)`
    /// on this broker, whatever the process's environment: the folder, or an
    /// error for replaced, missing, covered, inaccessible, revoked, wrong-app
    /// and invalid bookmarks. A moved folder resolves with `isStale` set: save
    /// `bookmarkData(renewing:)` in place of the old data, as Apple advises.
    public func url(
        resolvingBookmarkData data: [UInt8], app: AppID, options: ResolutionOptions = [], bookmarkDataIsStale isStale: inout Bool
    ) throws(BookmarkResolutionError) -> SecurityScopedURL {
        let resolution: BookmarkResolution
        do {
            resolution = try resolve(data, app: app, options: options)
        } catch {
            throw BookmarkResolutionError(status: .invalid, message: error.description)
        }
        guard let folder = resolution.folder, let path = resolution.currentPath, let access = resolution.access else {
            throw BookmarkResolutionError(status: resolution.status, message: resolution.message)
        }
        isStale = resolution.isStale
        return SecurityScopedURL(path: path, access: access, bookmark: data, backend: .local(folder: folder, grantID: resolution.grant?.id, broker: self))
    }
}

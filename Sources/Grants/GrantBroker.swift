@preconcurrency import Glibc
import Crypto
import Sandbox
import SystemPackage

/// The picker-broker's authority: it mints grants for folders a user picked,
/// seals them into bookmarks, resolves bookmarks, and revokes grants. It
/// runs only outside any sandbox: its state directory is in no sandbox's
/// rules, and it refuses to grant a folder that would put it in one.
public final class GrantBroker {
    public let state: StateDirectory
    /// Folders no grant may hold or lie inside: the state directory and
    /// the app containers.
    public let protectedFolders: [String]
    let keyring: Keyring
    /// The ledger, opened on first use (`reading`), read-only until something
    /// needs to write; nil while the state is new or not yet read.
    private var openLedger: Ledger?
    /// No keys and no grants: nothing is made until a grant.
    private var isNew: Bool
    var locator = FolderLocator()
    /// How many times `resolve` read the ledger rather than the launch cache
    /// (for tests and benchmarks).
    private(set) var ledgerLookups = 0

    /// Opens the broker's state and checks it whole: a state folder with
    /// no keys and no grants is new (and made on the first grant); anything
    /// else must have its keys, `current` and a ledger, or is an error that
    /// says what to do. The ledger's content is read (and a damaged or too
    /// new one refused) when first needed: a launch whose grants the launch
    /// cache answers for never opens SQLite (see `LedgerCache`). Nothing is
    /// written here.
    public init(state: StateDirectory, protectedFolders: [String] = []) throws(GrantError) {
        self.state = state
        self.protectedFolders = [state.path] + protectedFolders
        keyring = Keyring(state: state)
        isNew = true  // set before `inspect`, a method, may run
        let inspected = try state.withLock(exclusive: false) { () throws(GrantError) in try inspect(access: .readOnly, open: false) }
        if case .new = inspected { isNew = true } else { isNew = false }
    }

    /// What `inspect` found.
    private enum Inspected {
        /// No keys and no grants.
        case new
        /// Keys, and a ledger file that passed its checks (not opened).
        case vetted
        case opened(Ledger)
    }

    /// Reads what the state holds, refusing what is untrusted, damaged or
    /// incomplete; the ledger's content only when `open`.
    private func inspect(access: Ledger.Access, open: Bool) throws(GrantError) -> Inspected {
        _ = try keyring.attach()
        // `current` is there and names a good key; the folder is listed only
        // when it is not (one read fewer at every launch with a grant).
        if try keyring.currentIfPresent() == nil {
            let ledgerPath = state.path + "/" + Ledger.fileName
            let file = try StateDirectory.statPrivateFile(Ledger.fileName, in: state.descriptor, path: ledgerPath)
            if try keyring.inventory().keys.isEmpty {
                // New, or a first use interrupted before its keys appeared
                // (they appear last, whole): nothing to lose either way.
                guard let file, file.st_size > 0 else { return .new }
                let ledger = try Ledger(state: state, vetted: file, access: access)
                let grants = try ledger.count()
                guard grants == 0 else {
                    throw .damagedState(
                        path: keyring.folderPath, problem: "holds no keys, but the ledger holds \(grants) grant\(grants == 1 ? "" : "s"), so no bookmark can be opened",
                        fix: "Restore \(keyring.folderPath) from a backup; or, \(startOver).")
                }
                return .new
            }
            _ = try keyring.current()  // throws: keys without `current`
        }
        let file = try vettedLedgerFile()
        return open ? .opened(try Ledger(state: state, vetted: file, access: access)) : .vetted
    }

    private var startOver: String { "to start over (every bookmark becomes invalid), move \(state.path) aside" }

    /// The ledger's file, checked, in a state that has keys.
    private func vettedLedgerFile() throws(GrantError) -> stat {
        let ledgerPath = state.path + "/" + Ledger.fileName
        guard let file = try StateDirectory.statPrivateFile(Ledger.fileName, in: state.descriptor, path: ledgerPath) else {
            throw .damagedState(
                path: ledgerPath, problem: "is missing while keys exist: every grant would be lost",
                fix: "Restore it from a backup; or, \(startOver).")
        }
        guard file.st_size > 0 else {
            throw .damagedState(
                path: ledgerPath, problem: "is empty (0 bytes) while keys exist: every grant was lost",
                fix: "Restore it from a backup; or, \(startOver).")
        }
        return file
    }

    /// Reads the ledger with `body`; nil while the state is new. The ledger
    /// is opened now if it was not (under the shared lock) and kept, except
    /// a snapshot (`Ledger.isSnapshot`: a disk too full to read it
    /// otherwise), which is read under that lock and dropped.
    func read<T>(_ body: (Ledger) throws(GrantError) -> T) throws(GrantError) -> T? {
        if let openLedger { return try body(openLedger) }
        guard !isNew else { return nil }
        return try state.withLock(exclusive: false) { () throws(GrantError) -> T? in
            guard let ledger = try readerLocked() else { return nil }
            return try body(ledger)
        }
    }

    /// The ledger for reading while the caller holds the state's lock
    /// (either kind): the open one, or one opened now (kept unless a snapshot).
    private func readerLocked() throws(GrantError) -> Ledger? {
        if let openLedger { return openLedger }
        guard !isNew else { return nil }
        let ledger = try Ledger(state: state, vetted: try vettedLedgerFile(), access: .readOnly)
        if !ledger.isSnapshot { openLedger = ledger }
        return ledger
    }

    /// The ledger for writing: reopened with write access if it was
    /// read-only (adopting an older schema), or the state made if new.
    /// Under the exclusive lock, with the launch cache removed first: opening
    /// for writing may change the ledger (its schema).
    func writing() throws(GrantError) -> Ledger {
        if let openLedger, openLedger.access == .readWrite { return openLedger }
        return try state.withLock(exclusive: true) { () throws(GrantError) -> Ledger in
            try LedgerCache.remove(from: state)
            return try writingLocked()
        }
    }

    /// `writing` for a caller that holds the exclusive lock and removed the cache.
    private func writingLocked() throws(GrantError) -> Ledger {
        if let openLedger, openLedger.access == .readWrite { return openLedger }
        // Read again: another process may have made the state meanwhile.
        let ledger: Ledger
        if case .opened(let opened) = try inspect(access: .readWrite, open: true) { ledger = opened } else { ledger = try makeState() }
        openLedger = ledger
        isNew = false
        return ledger
    }

    /// Makes a new state: the ledger (0600, O_EXCL, schema inside), then
    /// `keys/` with its first key, which appears whole by rename. Until
    /// keys exist the state reads as new, so an interruption loses nothing.
    /// Under the exclusive lock.
    private func makeState() throws(GrantError) -> Ledger {
        keyring.removeLeftovers()
        // Before the ledger is made, which inherits it (see RevocationReserve.writeInPlace).
        RevocationReserve.writeInPlace(in: state)
        let ledgerPath = state.path + "/" + Ledger.fileName
        let fd = openat(state.descriptor.rawValue, Ledger.fileName, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd >= 0 {
            // Closing it is safe: no SQLite connection can have a file open that did not exist.
            fchmod(fd, 0o600)
            fsync(fd)
            close(fd)
            fsync(state.descriptor.rawValue)
        } else if case let code = errno, code != EEXIST {
            throw code == EROFS || code == EACCES
                ? .readOnlyState(path: state.path, needed: "making the grant state")
                : .stateDirectory(step: "creating \(ledgerPath)", errno: Errno(rawValue: code))
        }
        guard let file = try StateDirectory.statPrivateFile(Ledger.fileName, in: state.descriptor, path: ledgerPath) else {
            throw .stateDirectory(step: "opening \(ledgerPath)", errno: .noSuchFileOrDirectory)
        }
        let ledger = try Ledger(state: state, vetted: file, access: .readWrite, create: true)
        // Before the keys (which make the state count): a state is made able
        // to revoke on a full disk.
        try RevocationReserve.make(in: state)
        // Renamed over an empty keys/ (older versions made one at once), if any.
        try keyring.makeFolder()
        return ledger
    }

    /// A grant just minted, and the bookmark to hand to the app.
    public struct Issued: Sendable {
        public let id: GrantID
        public let path: FilePath
        public let access: GrantAccess
        public let bookmark: [UInt8]
    }

    /// Grants `app` access to the folder at `path`, as picked by the user.
    /// The grant is live at once: if the bookmark may fail to reach its
    /// place, use `grant(app:folder:access:deliver:)`.
    public func grant(app: AppID, folder path: String, access: GrantAccess) throws(GrantError) -> Issued {
        try grant([(app, path, access)]).first!
    }

    /// Grants `app` access to the folder at `path`, as picked by the user,
    /// and hands the bookmark to `deliver` (which saves it) before the grant
    /// takes effect. See `grant(app:opened:access:deliver:)`.
    public func grant(app: AppID, folder path: String, access: GrantAccess, deliver: ([UInt8]) throws -> Void) throws -> Issued {
        try grant(app: app, opened: try openFolder(path).fd, access: access, deliver: deliver)
    }

    /// Grants `app` the folder the user picked, already open: the picker holds
    /// the folder it shows, so nothing swapped in meanwhile is granted. The
    /// bookmark goes to `deliver` (which saves it where the app finds it)
    /// before the grant takes effect. Until `deliver` returns the grant is
    /// pending: a process killed meanwhile leaves a grant that resolves as
    /// invalid ("the pick did not complete") and gives no access. If
    /// `deliver` throws, the grant is deleted and the error rethrown.
    public func grant(app: AppID, opened folder: OwnedDescriptor, access: GrantAccess, deliver: ([UInt8]) throws -> Void) throws -> Issued {
        guard let st = try? folder.status(), st.st_mode & S_IFMT == S_IFDIR else {
            throw GrantError.notADirectory(folder.currentPath.map { "\($0)" } ?? "the chosen folder")
        }
        let path: FilePath
        do { path = FilePath(bytes: try FilePath.kernelPath(ofDescriptor: folder.rawValue)) } catch {
            // Walked to one name at a time, a folder can lie deeper than the kernel can name.
            throw error == .fileNameTooLong ? GrantError.pathTooLong("the chosen folder") : GrantError.notADirectory("the chosen folder")
        }
        try checkNotProtected(folder, path: path)
        let identity = try FolderIdentity.of(folder, path: path)
        let issued = try issue([(app, identity, path, access)], pending: Int64(time(nil))).first!
        let ledger = try writing()
        do {
            try deliver(issued.bookmark)
        } catch {
            try? ledger.discard(issued.id)
            throw error
        }
        try ledger.activate(issued.id)
        return issued
    }

    /// Several grants in one ledger transaction (imports, benchmarks).
    public func grant(_ requests: [(app: AppID, folder: String, access: GrantAccess)]) throws(GrantError) -> [Issued] {
        var verified: [String: (FolderIdentity, FilePath)] = [:]
        var folders: [(AppID, FolderIdentity, FilePath, GrantAccess)] = []
        for request in requests {
            if verified[request.folder] == nil {
                let folder = try openFolder(request.folder)
                verified[request.folder] = (try FolderIdentity.of(folder.fd, path: folder.path), folder.path)
            }
            let (identity, path) = verified[request.folder]!
            folders.append((request.app, identity, path, request.access))
        }
        return try issue(folders, pending: nil)
    }

    /// Seals a bookmark for each verified folder and records the grants in one transaction.
    private func issue(
        _ folders: [(app: AppID, identity: FolderIdentity, path: FilePath, access: GrantAccess)], pending: Int64?
    ) throws(GrantError) -> [Issued] {
        let ledger = try writing()
        let (keyID, key) = try keyring.current()
        var records: [GrantRecord] = []
        var issued: [Issued] = []
        for request in folders {
            let (identity, path) = (request.identity, request.path)
            let token = GrantToken.random()
            let created = Int64(time(nil))
            let bookmark = Bookmark(token: token, access: request.access, created: created, identity: identity, path: path)
            let blob: [UInt8]
            do { blob = try bookmark.seal(app: request.app, keyID: keyID, key: key) } catch {
                throw .keyring("sealing: \(error)")
            }
            records.append(GrantRecord(
                id: token.id, app: request.app.rawValue, access: request.access, path: path, handle: identity.handle,
                created: created, revoked: nil, pending: pending))
            issued.append(Issued(id: token.id, path: path, access: request.access, bookmark: blob))
        }
        try ledger.insert(records)
        // With its filesystem, for LinkTrust. A crash before this leaves the
        // grant compared by handle alone: stricter, never looser.
        for request in folders where request.access == .readWrite {
            try ledger.recordWritable(request.identity, path: request.path, source: "grant to " + request.app.rawValue, at: Int64(time(nil)))
        }
        return issued
    }

    /// Opens a folder the user picked and checks it may be granted at all.
    private func openFolder(_ path: String) throws(GrantError) -> (fd: OwnedDescriptor, path: FilePath) {
        let fd: OwnedDescriptor
        do { fd = try .openFolder(FilePath(path), follow: true) } catch {
            throw error == .noSuchFileOrDirectory ? .folderNotFound(path)
                : error == .notDirectory ? .notADirectory(path) : error == .fileNameTooLong ? .pathTooLong(path)
                : .stateDirectory(step: "opening \(path)", errno: error)
        }
        let resolved = fd.currentPath ?? FilePath(path)
        try checkNotProtected(fd, path: resolved)
        return (fd, resolved)
    }

    /// Refuses a folder that holds, or lies inside, a protected folder,
    /// comparing inodes along ".." as Landlock does, so symlinks change
    /// nothing. ".." from a mount's root leads to where it is mounted: a
    /// protected path that is itself a bind mount of a folder inside the
    /// grant is not seen (docs/known-limits.md).
    public func checkNotProtected(_ folder: OwnedDescriptor, path: FilePath) throws(GrantError) {
        // The state folder is the one checked and held open, whatever its
        // path names now; an absent folder has nothing to expose.
        let guarded = protectedFolders.map { protected in
            protected == state.path ? state.descriptor : try? OwnedDescriptor.openPath(FilePath(protected), follow: true)
        }
        // An error walking up is a refusal: fail closed.
        if let index = Ancestry.firstOverlap(of: folder, among: guarded) {
            // Said apart from a proven overlap: a folder this user may not
            // search (mode 000) cannot be walked up from.
            do { _ = try Ancestry.isBeneath(folder, anyOf: []) } catch {
                throw .unprovenFolder(folder: "\(path)", protected: protectedFolders[index], errno: error)
            }
            throw .protectedFolder(folder: "\(path)", protected: protectedFolders[index])
        }
        // Then the kernel's interfaces (a folder holding the state is named for that first).
        if let exposed = KernelInterfaces.exposed(by: folder.rawValue, path: path.bytes) {
            throw .kernelInterface(folder: Printable.path(path), at: Printable.path(bytes: exposed.path), type: exposed.type)
        }
    }

    // MARK: Resolution

    /// Options for `resolve`, as Apple's `URL.BookmarkResolutionOptions`.
    public struct ResolutionOptions: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// Do not look for a moved folder: report it missing or replaced.
        public static let withoutSearch = ResolutionOptions(rawValue: 1)
        /// Find moved folders only by bounded search, even with CAP_DAC_READ_SEARCH.
        public static let withoutFileHandles = ResolutionOptions(rawValue: 2)
    }

    /// Classifies a bookmark blob for `app`. Never throws for what the blob
    /// says; throws only when the broker's own state cannot be read.
    public func resolve(_ blob: [UInt8], app: AppID, options: ResolutionOptions = []) throws(GrantError) -> BookmarkResolution {
        // Only read: a new state has no key, and resolving never makes one.
        let currentKeyID = try keyring.currentIDIfAny()
        let bookmark: Bookmark
        let keyID: [UInt8]
        do {
            (bookmark, keyID) = try Bookmark.open(blob, app: app) { id in try self.keyring.key(id) }
        } catch let error as Bookmark.OpenError {
            switch error {
            case .wrongApp(let other):
                return outcome(.wrongApp, message: "this bookmark belongs to another app (\(other)), not \(app): each app must ask the user itself")
            case .unknownKey:
                return outcome(.invalid, message: "this bookmark was sealed with a key this broker does not have (retired, or another machine's): pick the folder again")
            case .forged:
                return outcome(.invalid, message: "this bookmark is damaged or forged: it fails authentication. Pick the folder again.")
            case .malformed(let why):
                return outcome(.invalid, message: "this is not a valid bookmark (\(why)): pick the folder again")
            }
        } catch let error as GrantError {
            throw error
        } catch {
            return outcome(.invalid, message: "this bookmark could not be read: \(error)")
        }

        guard let record = try launchRecord(bookmark.token.id) else {
            return outcome(.invalid, bookmark: bookmark, message: "this bookmark was not issued by this broker (its grant is not in the ledger): pick the folder again")
        }
        if record.revoked != nil {
            return outcome(.revoked, record: record, bookmark: bookmark, message: "access to \(bookmark.path) was revoked: ask the user to pick the folder again if it is still wanted")
        }
        if record.pending != nil {
            return outcome(.invalid, record: record, bookmark: bookmark, message: "the pick that made this bookmark did not complete (the bookmark may not have been saved), so it grants nothing: pick \(bookmark.path) again")
        }
        let sealedWithOldKey = keyID != currentKeyID

        // Is the folder at its path, and is it the same folder?
        var somethingAtPath = false
        if let atPath = try? OwnedDescriptor.openPath(bookmark.path, follow: false) {
            somethingAtPath = true
            if let st = try? atPath.status(), st.st_mode & S_IFMT == S_IFDIR,
               let identity = try? FolderIdentity.of(atPath, path: bookmark.path), identity.isSameFolder(as: bookmark.identity) {
                return BookmarkResolution(
                    status: .fresh, grant: record, access: bookmark.access, originalPath: bookmark.path,
                    currentPath: bookmark.path, isStale: sealedWithOldKey, method: nil, folder: atPath,
                    message: sealedWithOldKey ? "\(bookmark.path) is in place; the bookmark was sealed with an older key, so save it again" : "\(bookmark.path) is in place",
                    bookmark: bookmark)
            }
        }
        let stale = { (status: BookmarkStatus, message: String) in
            self.outcome(status, record: record, bookmark: bookmark, message: message)
        }
        // Whether the folder was deleted, as its own filesystem says (a file handle that names nothing).
        var gone = false
        if !options.contains(.withoutSearch) {
            var locator = self.locator
            if options.contains(.withoutFileHandles) { locator.useFileHandles = false }
            switch locator.locate(bookmark.identity, near: bookmark.path) {
            case .found(let folder, let path, let method):
                // A moved folder is followed only to a path that leads to it.
                if PathReach.leads(path, to: folder) {
                    let because = somethingAtPath ? "something else now sits at \(bookmark.path)" : "\(bookmark.path) is gone"
                    return BookmarkResolution(
                        status: .moved, grant: record, access: bookmark.access, originalPath: bookmark.path, currentPath: path,
                        isStale: true, method: method, folder: folder,
                        message: "Reconnect your folder: it moved to \(path) (\(because); found by \(method))", bookmark: bookmark)
                }
                if let cover = PathReach.coveringMount(on: path, hiding: folder) {
                    return stale(.covered, "\(bookmark.path) is covered: another filesystem is mounted on \(cover), hiding the folder you granted (it is still there, found by \(method)). "
                        + "Nothing is granted while it is hidden: unmount \(cover), then try again.")
                }
                // Moved again meanwhile, or out of this process's view: as if not found.
            case .gone:
                gone = true
            case .tooLong(let method):
                return stale(.inaccessible, "\(bookmark.path) moved where it cannot be reached: the folder is still there (found by \(method)), but "
                    + "\(PathLimit.exceeded). Move it up, then try again. Nothing was granted.")
            case .notFound:
                break
            }
        }
        if !gone, let cover = PathReach.likelyCover(of: bookmark.identity, at: bookmark.path) {
            return stale(.covered, "\(bookmark.path) is covered: another filesystem is mounted on \(cover), so the path no longer leads to the folder you granted. "
                + "Whether the folder still lies beneath the mount cannot be told without looking it up by file handle (CAP_DAC_READ_SEARCH). "
                + "Nothing is granted: unmount \(cover) and try again, or pick the folder again.")
        }
        if !somethingAtPath, let denied = PathReach.unsearchable(on: bookmark.path) {
            let digits = String(denied.mode, radix: 8)
            let mode = String(repeating: "0", count: max(0, 4 - digits.count)) + digits
            let fix = denied.owner == geteuid()
                ? "give yourself search permission on it again (`chmod u+x \(denied.folder)`)"
                : "ask its owner (uid \(denied.owner)) to let you search it (x permission), or resolve as a user who may"
            return stale(.inaccessible, "\(bookmark.path) cannot be reached: you (uid \(geteuid())) may not search \(denied.folder) (mode \(mode), owner uid \(denied.owner)), "
                + "so whether the folder is still there cannot be told. This is a permission problem, not a deleted or moved folder: \(fix). Nothing was granted.")
        }
        if somethingAtPath {
            return stale(.replaced, "\(bookmark.path) is not the folder you granted: it was deleted and recreated, swapped or replaced by a link. Pick it again if you trust it.")
        }
        if !gone, !locator.existingAncestors(of: bookmark.path).contains(where: { ancestor in
            (try? OwnedDescriptor.openPath(ancestor, follow: false)).map(bookmark.identity.mayShareFilesystem(with:)) ?? false
        }) {
            return stale(.missing, "\(bookmark.path) no longer exists, and no folder above it is on the filesystem it was on: is that filesystem unmounted (a disk removed)? Mount it where it was and try again, or pick the folder again.")
        }
        return stale(.missing, "\(bookmark.path) no longer exists and was not found nearby: was it deleted, or moved to another disk? Pick it again.")
    }

    /// The ledger's record of grant `id`: from the launch cache when it
    /// provably holds what the ledger holds now (see `LedgerCache`), else
    /// read from the ledger, and cached when live.
    private func launchRecord(_ id: GrantID) throws(GrantError) -> GrantRecord? {
        guard !isNew else { return nil }
        let (keyID, key) = try keyring.current()
        // The cache knows nothing of the revocation reserve, which a revoke
        // on a full disk writes without changing the ledger: what it holds
        // is applied, read before the cache (see `RevocationReserve.held`).
        let held = try RevocationReserve.held(in: state)
        var cache: LedgerCache?
        if let files = try LedgerCache.Files.now(in: state), let cached = try LedgerCache.read(from: state, keyID: keyID, key: key),
           cached.files == files {
            if let record = cached.record(id) { return RevocationReserve.applying(held, to: record) }
            cache = cached
        }
        return try state.withLock(exclusive: false) { () throws(GrantError) -> GrantRecord? in
            // Opened first (which may make the -wal), then the files' status,
            // then the read: a change after the status changes the status.
            guard let ledger = try readerLocked() else { return nil }
            let files = try LedgerCache.Files.now(in: state)
            ledgerLookups += 1
            guard let record = try ledger.find(id) else { return nil }
            if record.isLive, let files {
                let base = cache?.files == files ? cache! : LedgerCache(files: files, records: [])
                base.adding(record).write(to: state, keyID: keyID, key: key)
            }
            return record
        }
    }

    private func outcome(_ status: BookmarkStatus, record: GrantRecord? = nil, bookmark: Bookmark? = nil, message: String) -> BookmarkResolution {
        BookmarkResolution(
            status: status, grant: record, access: bookmark?.access, originalPath: bookmark?.path, currentPath: nil,
            isStale: false, method: nil, folder: nil, message: message, bookmark: bookmark)
    }

    /// Accepts a moved folder, or an old key, as Apple tells apps to: a new
    /// bookmark for the same grant, at the folder's current path, sealed with
    /// the current key. The ledger follows the move. A folder that has come
    /// to hold, or moved into, the broker's state or the containers is
    /// refused: no bookmark ever names such a place.
    public func renew(_ resolution: BookmarkResolution, app: AppID) throws(GrantError) -> [UInt8] {
        guard var bookmark = resolution.bookmark, let record = resolution.grant,
              resolution.status == .fresh || resolution.status == .moved, let path = resolution.currentPath,
              let folder = resolution.folder else {
            throw .bookmarkFile(path: resolution.originalPath.map { "\($0)" } ?? "?", problem: "only a fresh or moved bookmark can be renewed, not a \(resolution.status.rawValue) one")
        }
        try checkNotProtected(folder, path: path)
        bookmark.path = path
        let (keyID, key) = try keyring.current()
        let blob: [UInt8]
        do { blob = try bookmark.seal(app: app, keyID: keyID, key: key) } catch { throw .keyring("sealing: \(error)") }
        if path != record.path { try writing().updatePath(record.id, to: path) }
        return blob
    }

    // MARK: Listing and revoking

    /// Every grant (pending ones too: `GrantRecord.pending`), with the
    /// revocations the reserve holds applied.
    public func list(app: AppID? = nil) throws(GrantError) -> [GrantRecord] {
        try read { (ledger) throws(GrantError) in try ledger.list(app: app?.rawValue) } ?? []
    }

    public func count() throws(GrantError) -> Int {
        try read { (ledger) throws(GrantError) in try ledger.count() } ?? 0
    }

    /// The ledger's record of one grant, read now (the reserve applied).
    func record(_ id: GrantID) throws(GrantError) -> GrantRecord? {
        try read { (ledger) throws(GrantError) in try ledger.find(id) } ?? nil
    }

    /// Revocations the reserve holds that the ledger could not take yet
    /// (the disk was full when they were made).
    public func heldRevocations() throws(GrantError) -> Int {
        try RevocationReserve.held(in: state).count
    }

    /// Whether each grant is live (neither revoked, pending nor unknown),
    /// read from the ledger now, never from the launch cache.
    public func liveness(of ids: [GrantID]) throws(GrantError) -> [GrantID: Bool] {
        var live: [GrantID: Bool] = [:]
        for id in ids { live[id] = try record(id)?.isLive ?? false }
        return live
    }

    /// The grant a bookmark of `app` names, when it is authentic and sealed
    /// for `app` (nothing else is checked: not the ledger, not the folder);
    /// nil otherwise.
    public func grantID(of blob: [UInt8], app: AppID) -> GrantID? {
        guard let (bookmark, _) = try? Bookmark.open(blob, app: app, keys: { id in try self.keyring.key(id) }) else { return nil }
        return bookmark.token.id
    }

    /// The ledger's file name in the state folder (with SQLite's `-wal` and `-shm` beside it).
    public static let ledgerFileName = Ledger.fileName

    /// The state folder's descriptor, to watch it for changes (inotify through /proc/self/fd).
    public var stateDescriptor: CInt { state.descriptor.rawValue }

    /// Which grants `revoke` takes back.
    public enum Revocation: Sendable {
        /// One grant, by id or a unique prefix of it.
        case grant(String)
        /// Every grant of an app.
        case app(AppID)
        /// Every grant of the folder at this path, for every app.
        case folder(String)
    }

    /// What `revoke` did.
    public struct RevocationOutcome: Sendable {
        /// How many of the grants named were live, and are revoked now.
        public let revoked: Int
        /// Every grant the selection names, revoked now or before (a running
        /// sandbox may still hold one revoked earlier).
        public let named: Set<GrantID>
        /// Why the ledger could not be written, when it could not (a full
        /// disk): the revocations are then held in the revocation reserve,
        /// synced and in force (every grant they name resolves as revoked),
        /// until a later write of the ledger takes them in.
        public let notInLedger: GrantError?
        /// How many revocations the reserve holds now, not yet in the ledger.
        public let held: Int
        /// The reserve's path, to say where they are held.
        public let reservePath: String
    }

    /// Revokes the grants `selection` names. The revocation is first written
    /// into the revocation reserve (space taken ahead of time, synced), then
    /// into the ledger together with any the reserve held; when the ledger
    /// cannot be written (a full disk), the reserve alone holds it, and it
    /// is in force all the same (`RevocationOutcome.notInLedger`). Throws,
    /// revoking nothing, when neither can hold it: a reserve that is full or
    /// missing, and a ledger that cannot be written.
    public func revoke(_ selection: Revocation) throws(GrantError) -> RevocationOutcome {
        let reservePath = RevocationReserve.path(in: state)
        var target: RevocationReserve.Target?
        switch selection {
        case .grant: break  // found in the ledger, under the lock
        case .app(let app): target = .app(app.rawValue)
        case .folder(let path):
            let fd: OwnedDescriptor
            do { fd = try .openPath(FilePath(path), follow: true) } catch { throw .folderNotFound(path) }
            target = .folder(handle: try FolderIdentity.of(fd, path: FilePath(path)).handle)
        }
        let noGrant = { (prefix: String, matches: Int) in
            matches == 0 ? GrantError.noSuchGrant(prefix: prefix) : .ambiguousGrant(prefix: prefix, matches: matches)
        }
        guard !isNew else {
            if case .grant(let prefix) = selection { throw noGrant(prefix, 0) }
            return RevocationOutcome(revoked: 0, named: [], notInLedger: nil, held: 0, reservePath: reservePath)
        }
        return try state.withLock(exclusive: true) { () throws(GrantError) -> RevocationOutcome in
            // As before every change: no launch goes on trusting a cache of
            // what the ledger said (see `LedgerCache`). An unlink needs no space.
            try LedgerCache.remove(from: state)
            // A snapshot, on a disk too full to read the ledger otherwise, is
            // exact here: the exclusive lock keeps every writer out.
            guard let reader = try readerLocked() else { throw .ledger("the ledger could not be read") }
            if case .grant(let prefix) = selection {
                let matches = try reader.find(prefix: prefix.lowercased())
                guard matches.count == 1 else { throw noGrant(prefix, matches.count) }
                target = .grant(matches[0].id)
            }
            let named = try reader.find(target!)
            let live = named.filter(\.isLive).count
            let now = Int64(time(nil))
            var reserve = try RevocationReserve.open(in: state)
            // First where it needs no new space: from here on it is in force.
            // Without a reserve, or with a full one, it goes to the ledger alone.
            var unheld: GrantError?  // the reserve is full
            if live > 0, reserve != nil {
                do throws(GrantError) { try reserve!.hold(target!, at: now, named: Set(named.map(\.id))) } catch {
                    guard case .revocationNotRecorded = error else { throw error }
                    unheld = error
                }
            }
            let direct = live > 0 && (reserve == nil || unheld != nil) ? [target!] : []
            let outcome = { (notInLedger: GrantError?) in
                RevocationOutcome(revoked: live, named: Set(named.map(\.id)), notInLedger: notInLedger,
                                  held: notInLedger == nil ? 0 : reserve?.entries.count ?? 0, reservePath: reservePath)
            }
            // Nothing new, and nothing held to take in: the ledger is left alone.
            guard !direct.isEmpty || reserve?.entries.isEmpty == false else { return outcome(nil) }
            do throws(GrantError) {
                try writingLocked().fold(direct: direct, at: now)
            } catch {
                if unheld != nil {
                    throw .revocationNotRecorded(
                        problem: "the ledger could not be written (\(error)), and the revocation reserve \(reservePath) is full: it holds "
                            + "\(reserve?.entries.count ?? 0) revocations made while the ledger could not take them",
                        fix: "Free space on the filesystem of \(state.path), then run this again: the next write of the ledger takes the held revocations in and frees the reserve.",
                        named: Set(named.map(\.id)))
                }
                guard reserve != nil else {
                    throw .revocationNotRecorded(
                        problem: "the ledger could not be written (\(error)), and this state has no revocation reserve (\(reservePath)) to hold the "
                            + "revocation instead: it is made with the state, or by the first write of the ledger with room in a state made before it existed",
                        fix: "Free space on the filesystem of \(state.path), then run this again.", named: Set(named.map(\.id)))
                }
                return outcome(error)
            }
            return outcome(nil)
        }
    }

    /// Revokes one grant by id (or a unique prefix of it).
    @discardableResult
    public func revoke(grant prefix: String) throws(GrantError) -> Int {
        try revoke(.grant(prefix)).revoked
    }

    @discardableResult
    public func revoke(app: AppID) throws(GrantError) -> Int {
        try revoke(.app(app)).revoked
    }

    /// Revokes every grant of the folder at `path`, for every app.
    @discardableResult
    public func revoke(folder path: String) throws(GrantError) -> Int {
        try revoke(.folder(path)).revoked
    }

    /// Seals new bookmarks with a new key. Old bookmarks resolve as stale
    /// until `retireOldKeys`, after which they are invalid.
    public func rotateKey() throws(GrantError) {
        let wasNew = isNew
        _ = try writing()  // a new state is made with a first key
        guard !wasNew else { return }
        try state.withLock(exclusive: true) { () throws(GrantError) in
            keyring.removeLeftovers()
            try keyring.rotate()
        }
    }

    public func retireOldKeys() throws(GrantError) -> Int {
        guard !isNew else { return 0 }
        return try state.withLock(exclusive: true) { () throws(GrantError) in
            keyring.removeLeftovers()
            return try keyring.retireOldKeys()
        }
    }
}

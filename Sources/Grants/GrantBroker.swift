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
    let ledger: Ledger
    var locator = FolderLocator()

    public init(state: StateDirectory, protectedFolders: [String] = []) throws(GrantError) {
        self.state = state
        self.protectedFolders = [state.path] + protectedFolders
        keyring = Keyring(state: state)
        ledger = try Ledger(path: state.path + "/ledger.sqlite")
    }

    /// A grant just minted, and the bookmark to hand to the app.
    public struct Issued: Sendable {
        public let id: GrantID
        public let path: String
        public let access: GrantAccess
        public let bookmark: [UInt8]
    }

    /// Grants `app` access to the folder at `path`, as picked by the user.
    public func grant(app: AppID, folder path: String, access: GrantAccess) throws(GrantError) -> Issued {
        try grant([(app, path, access)]).first!
    }

    /// Several grants in one ledger transaction (imports, benchmarks).
    public func grant(_ requests: [(app: AppID, folder: String, access: GrantAccess)]) throws(GrantError) -> [Issued] {
        var verified: [String: (FolderIdentity, String)] = [:]
        var folders: [(AppID, FolderIdentity, String, GrantAccess)] = []
        for request in requests {
            if verified[request.folder] == nil {
                let folder = try openFolder(request.folder)
                verified[request.folder] = (try FolderIdentity.of(folder.fd, path: folder.path), folder.path)
            }
            let (identity, path) = verified[request.folder]!
            folders.append((request.app, identity, path, request.access))
        }
        return try issue(folders)
    }

    /// Seals a bookmark for each verified folder and records the grants in one transaction.
    private func issue(_ folders: [(app: AppID, identity: FolderIdentity, path: String, access: GrantAccess)]) throws(GrantError) -> [Issued] {
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
                created: created, revoked: nil))
            issued.append(Issued(id: token.id, path: path, access: request.access, bookmark: blob))
        }
        try ledger.insert(records)
        return issued
    }

    /// Grants `app` the folder the user picked, already open: the picker holds
    /// the folder it shows, so nothing swapped in meanwhile is granted. The
    /// bookmark goes to `deliver` (write it where the app finds it); if that
    /// fails, the grant is withdrawn and the error thrown.
    public func grant(app: AppID, opened folder: OwnedDescriptor, access: GrantAccess, deliver: ([UInt8]) throws -> Void) throws -> Issued {
        guard let st = try? folder.status(), st.st_mode & S_IFMT == S_IFDIR, let path = folder.currentPath else {
            throw GrantError.notADirectory(folder.currentPath ?? "the chosen folder")
        }
        try checkNotProtected(folder, path: path)
        let issued = try issue([(app, try FolderIdentity.of(folder, path: path), path, access)]).first!
        do {
            try deliver(issued.bookmark)
        } catch {
            _ = try? ledger.revoke(id: issued.id, at: Int64(time(nil)))
            throw error
        }
        return issued
    }

    /// The folders `app` can write besides its container: its live read-write
    /// grants where they still are. Anything the app planted in them is suspect.
    public func writableFolders(of app: AppID) throws(GrantError) -> [OwnedDescriptor] {
        try ledger.list(app: app.rawValue).compactMap { record in
            guard record.revoked == nil, record.access == .readWrite,
                  let folder = try? OwnedDescriptor.openPath(record.path, followFinalSymlink: true),
                  let identity = try? FolderIdentity.of(folder, path: record.path),
                  identity.handle == record.handle else { return nil }
            return folder
        }
    }

    /// Opens a folder the user picked and checks it may be granted at all.
    private func openFolder(_ path: String) throws(GrantError) -> (fd: OwnedDescriptor, path: String) {
        let fd: OwnedDescriptor
        do { fd = try .openPath(path, followFinalSymlink: true) } catch {
            throw error == .noSuchFileOrDirectory ? .folderNotFound(path) : .stateDirectory(step: "opening \(path)", errno: error)
        }
        guard let st = try? fd.status(), st.st_mode & S_IFMT == S_IFDIR else { throw .notADirectory(path) }
        let resolved = fd.currentPath ?? path
        try checkNotProtected(fd, path: resolved)
        return (fd, resolved)
    }

    /// Refuses a folder that holds, or lies inside, a protected folder,
    /// comparing inodes along ".." as Landlock does, so symlinks and bind
    /// mounts change nothing.
    public func checkNotProtected(_ folder: OwnedDescriptor, path: String) throws(GrantError) {
        guard let folderID = try? folder.status().identityPair else { return }
        for protected in protectedFolders {
            guard let guarded = try? OwnedDescriptor.openPath(protected, followFinalSymlink: true),
                  let guardedID = try? guarded.status().identityPair else { continue }
            if Self.ancestors(of: guarded).contains(where: { $0 == folderID })
                || Self.ancestors(of: folder).contains(where: { $0 == guardedID }) {
                throw .protectedFolder(folder: path, protected: protected)
            }
        }
    }

    /// The (device, inode) of `fd` and of every folder above it.
    static func ancestors(of fd: OwnedDescriptor) -> [[UInt64]] {
        var result: [[UInt64]] = []
        var current = fd
        for _ in 0..<4096 {
            guard let id = try? current.status().identityPair else { break }
            result.append(id)
            guard let parent = try? OwnedDescriptor.openPath("..", followFinalSymlink: false, relativeTo: current),
                  let parentID = try? parent.status().identityPair, parentID != id else { break }
            current = parent
        }
        return result
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
        let (currentKeyID, _) = try keyring.current()
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

        guard let record = try ledger.find(bookmark.token.id) else {
            return outcome(.invalid, bookmark: bookmark, message: "this bookmark was not issued by this broker (its grant is not in the ledger): pick the folder again")
        }
        if record.revoked != nil {
            return outcome(.revoked, record: record, bookmark: bookmark, message: "access to \(bookmark.path) was revoked: ask the user to pick the folder again if it is still wanted")
        }
        let sealedWithOldKey = keyID != currentKeyID

        // Is the folder at its path, and is it the same folder?
        var somethingAtPath = false
        if let atPath = try? OwnedDescriptor.openPath(bookmark.path, followFinalSymlink: false) {
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
        if !options.contains(.withoutSearch) {
            var locator = self.locator
            if options.contains(.withoutFileHandles) { locator.useFileHandles = false }
            if let (folder, path, method) = locator.locate(bookmark.identity, near: bookmark.path) {
                let because = somethingAtPath ? "something else now sits at \(bookmark.path)" : "\(bookmark.path) is gone"
                return BookmarkResolution(
                    status: .moved, grant: record, access: bookmark.access, originalPath: bookmark.path, currentPath: path,
                    isStale: true, method: method, folder: folder,
                    message: "Reconnect your folder: it moved to \(path) (\(because); found by \(method))", bookmark: bookmark)
            }
        }
        if somethingAtPath {
            return outcome(.replaced, record: record, bookmark: bookmark, message: "\(bookmark.path) is not the folder you granted: it was deleted and recreated, swapped or replaced by a link. Pick it again if you trust it.")
        }
        return outcome(.missing, record: record, bookmark: bookmark, message: "\(bookmark.path) no longer exists and was not found nearby: was it deleted, or moved to another disk? Pick it again.")
    }

    private func outcome(_ status: BookmarkStatus, record: GrantRecord? = nil, bookmark: Bookmark? = nil, message: String) -> BookmarkResolution {
        BookmarkResolution(
            status: status, grant: record, access: bookmark?.access, originalPath: bookmark?.path, currentPath: nil,
            isStale: false, method: nil, folder: nil, message: message, bookmark: bookmark)
    }

    /// Accepts a moved folder, or an old key, as Apple tells apps to: a new
    /// bookmark for the same grant, at the folder's current path, sealed with
    /// the current key. The ledger follows the move.
    public func renew(_ resolution: BookmarkResolution, app: AppID) throws(GrantError) -> [UInt8] {
        guard var bookmark = resolution.bookmark, let record = resolution.grant,
              resolution.status == .fresh || resolution.status == .moved, let path = resolution.currentPath else {
            throw .bookmarkFile(path: resolution.originalPath ?? "?", problem: "only a fresh or moved bookmark can be renewed, not a \(resolution.status.rawValue) one")
        }
        bookmark.path = path
        let (keyID, key) = try keyring.current()
        let blob: [UInt8]
        do { blob = try bookmark.seal(app: app, keyID: keyID, key: key) } catch { throw .keyring("sealing: \(error)") }
        if path != record.path { try ledger.updatePath(record.id, to: path) }
        return blob
    }

    // MARK: Listing and revoking

    public func list(app: AppID? = nil) throws(GrantError) -> [GrantRecord] {
        try ledger.list(app: app?.rawValue)
    }

    public func count() throws(GrantError) -> Int {
        try ledger.count()
    }

    /// Revokes one grant by id (or a unique prefix of it).
    public func revoke(grant prefix: String) throws(GrantError) -> Int {
        let matches = try ledger.find(prefix: prefix.lowercased())
        guard matches.count == 1 else {
            throw .ledger(matches.isEmpty ? "no grant has an id starting with \(prefix): see `sandboxed-run grants list`" : "more than one grant starts with \(prefix): give more digits")
        }
        return try ledger.revoke(id: matches[0].id, at: Int64(time(nil)))
    }

    public func revoke(app: AppID) throws(GrantError) -> Int {
        try ledger.revoke(app: app.rawValue, at: Int64(time(nil)))
    }

    /// Revokes every grant of the folder at `path`, for every app.
    public func revoke(folder path: String) throws(GrantError) -> Int {
        let fd: OwnedDescriptor
        do { fd = try .openPath(path, followFinalSymlink: true) } catch { throw .folderNotFound(path) }
        return try ledger.revoke(handle: try FolderIdentity.of(fd, path: path).handle, at: Int64(time(nil)))
    }

    /// Seals new bookmarks with a new key. Old bookmarks resolve as stale
    /// until `retireOldKeys`, after which they are invalid.
    public func rotateKey() throws(GrantError) {
        try keyring.rotate()
    }

    public func retireOldKeys() throws(GrantError) -> Int {
        try keyring.retireOldKeys()
    }
}

extension stat {
    var identityPair: [UInt64] { [UInt64(st_dev), UInt64(st_ino)] }
}

@preconcurrency import Glibc
import CSyscalls
import Grants
import Sandbox
import SystemKit
import SystemPackage

/// What a staging area says of its grant: written once, when it is made.
public struct StagedGrant: Sendable, Equatable {
    public let app: AppID
    public let grant: GrantID
    /// The name the command knew the grant by (`SANDBOX_GRANT_<NAME>`).
    public let name: String
    /// The folder's path when it was staged.
    public let path: FilePath
    /// The bookmark it was launched with: resolved again before anything is
    /// applied, so a revoked, moved, replaced or covered grant applies nothing.
    public let bookmark: [UInt8]

    static let header = "sandboxed-run-staged-grant 1"

    public init(app: AppID, grant: GrantID, name: String, path: FilePath, bookmark: [UInt8]) {
        (self.app, self.grant, self.name, self.path, self.bookmark) = (app, grant, name, path, bookmark)
    }

    func encoded() -> [UInt8] {
        Array("\(Self.header)\napp \(app.rawValue)\ngrant \(grant.hex)\nname \(name)\npath \(Printable.hex(path.bytes))\nbookmark \(Printable.hex(bookmark))\n".utf8)
    }

    static func decode(_ bytes: [UInt8]) throws(StagingError) -> StagedGrant {
        func damaged(_ problem: String) -> StagingError { .damaged(file: "grant", problem: problem) }
        let lines = bytes.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
        guard lines.count == 6, lines[0] == header, bytes.last == UInt8(ascii: "\n") else { throw damaged("not six lines, or no \"\(header)\"") }
        var values: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let space = line.firstIndex(of: " ") else { throw damaged("a line without a value") }
            values[String(line[..<space])] = String(line[line.index(after: space)...])
        }
        guard let appText = values["app"], let app = try? AppID(appText), let grantText = values["grant"], let grant = GrantID(hex: grantText),
              let name = values["name"], !name.isEmpty, name.utf8.allSatisfy({ $0 < 0x80 && $0 > 0x20 }),
              let pathText = values["path"], let path = Printable.bytes(hex: pathText), path.first == UInt8(ascii: "/"),
              let bookmarkText = values["bookmark"], let bookmark = Printable.bytes(hex: bookmarkText) else {
            throw damaged("a value is missing or not valid")
        }
        return StagedGrant(app: app, grant: grant, name: name, path: FilePath(bytes: path), bookmark: bookmark)
    }
}

/// One grant's staged changes, in the broker's state:
/// `staging/APP/GRANT/` holds `lock`, `grant` (a `StagedGrant`), and
/// `current/` with the clone (`tree/`) and its `manifest`. A clone is built
/// in `new/` and renamed to `current` once it and its manifest are on disk,
/// so a launcher killed while cloning leaves no half-staged grant.
///
/// Whoever holds a `StagingArea` holds its lock (an open file description
/// lock on `lock`, gone when the holder dies): a running sandbox for the
/// whole run, or one `review` command. Two never share an area.
public final class StagingArea: @unchecked Sendable {
    public let app: AppID
    public let grant: GrantID
    /// `staging/APP/GRANT`, open for reading.
    let folder: OwnedDescriptor
    private let lock: OwnedDescriptor
    /// For messages: the area's path.
    let shown: String

    private init(app: AppID, grant: GrantID, folder: OwnedDescriptor, lock: OwnedDescriptor, shown: String) {
        (self.app, self.grant, self.folder, self.lock, self.shown) = (app, grant, folder, lock, shown)
    }

    /// Opens and locks `grant`'s area (made when `create`); nil when there is
    /// none and not `create`. Another holder: `StagingError.busy`.
    public static func open(state: StateDirectory, app: AppID, grant: GrantID, create: Bool) throws(StagingError) -> StagingArea? {
        let folder: OwnedDescriptor
        do {
            guard let opened = try state.privateFolder(["staging", app.rawValue, grant.hex], create: create) else { return nil }
            folder = opened
        } catch {
            throw .state(error)
        }
        let shown = state.path + "/staging/" + app.rawValue + "/" + grant.hex
        let fd = "lock".withCString { openat(folder.rawValue, $0, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw .system(step: "opening", path: Array((shown + "/lock").utf8), errno: Errno(rawValue: errno)) }
        let lock = OwnedDescriptor(taking: fd)
        var status = stat()
        guard fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == geteuid(), status.st_mode & 0o077 == 0 else {
            throw .damaged(file: "lock", problem: "not a private regular file of this user's")
        }
        if csb_ofd_lock(fd, Int16(CSB_F_WRLCK), 0) != 0 {
            if errno == EAGAIN || errno == EACCES { throw .busy(grant: grant.description) }
            throw .system(step: "locking", path: Array((shown + "/lock").utf8), errno: Errno(rawValue: errno))
        }
        return StagingArea(app: app, grant: grant, folder: folder, lock: lock, shown: shown)
    }

    /// The grants of `app` that have staged changes (an area with a clone).
    public static func staged(state: StateDirectory, app: AppID) throws(StagingError) -> [GrantID] {
        let appFolder: OwnedDescriptor
        do {
            guard let opened = try state.privateFolder(["staging", app.rawValue], create: false) else { return [] }
            appFolder = opened
        } catch {
            throw .state(error)
        }
        return try TreeWalk.names(in: appFolder, path: Array("staging/\(app.rawValue)".utf8)).compactMap { name in
            guard let id = GrantID(hex: String(decoding: name, as: UTF8.self)) else { return nil }
            var status = stat()
            let current = (name + Array("/current".utf8)).withCString { fstatat(appFolder.rawValue, $0, &status, AT_SYMLINK_NOFOLLOW) }
            return current == 0 ? id : nil
        }
    }

    /// What this area is for, nil before the first staged launch wrote it.
    public func stagedGrant() throws(StagingError) -> StagedGrant? {
        guard let bytes = try readPrivate("grant", limit: 1 << 16) else { return nil }
        let grant = try StagedGrant.decode(bytes)
        guard grant.app == app, grant.grant == self.grant else { throw .damaged(file: "grant", problem: "it names another app or grant") }
        return grant
    }

    /// Whether a clone is there (staged changes, perhaps none).
    public var hasClone: Bool {
        var status = stat()
        return "current".withCString { fstatat(folder.rawValue, $0, &status, AT_SYMLINK_NOFOLLOW) } == 0
    }

    /// The clone to bind in the folder's place: the one there (a later run
    /// builds on the staged changes), or a new clone of `host` (open for
    /// reading). Returns the clone's folder, O_PATH.
    public func prepare(host: OwnedDescriptor, as staged: StagedGrant) throws(StagingError) -> OwnedDescriptor {
        if !hasClone {
            try removeIfThere("new")
            let new = try makeFolder("new", in: folder)
            let tree = try makeFolder("tree", in: new)
            let manifest = try Clone.make(from: host, into: tree)
            try write("manifest", in: new, manifest.encoded(), durable: false)
            try write("grant", in: folder, staged.encoded(), durable: false)
            // Everything cloned is on disk before the clone counts (one
            // flush for all of it), and the rename before the command runs.
            try syncFilesystem(of: new, step: "flushing the clone")
            guard "new".withCString({ new in "current".withCString { renameat(folder.rawValue, new, folder.rawValue, $0) } }) == 0 else {
                throw .system(step: "putting in place", path: Array((shown + "/current").utf8), errno: Errno(rawValue: errno))
            }
            guard fsync(folder.rawValue) == 0 else { throw .system(step: "flushing", path: Array(shown.utf8), errno: Errno(rawValue: errno)) }
        } else if try stagedGrant() != staged {
            // The same grant, launched with another bookmark: one rewritten
            // when its folder moved (--on-stale follow). Kept, the old one
            // would resolve `moved` for good, and nothing could be accepted.
            try write("grant", in: folder, staged.encoded())
        }
        let current = try TreeWalk.openFolder(Array("current".utf8), in: folder, path: Array((shown + "/current").utf8))
        do {
            return try OwnedDescriptor.openFolder(Array("tree".utf8), relativeTo: current, follow: false, use: .path)
        } catch {
            throw .system(step: "opening", path: Array((shown + "/current/tree").utf8), errno: error)
        }
    }

    /// Flushes the clone: what the command wrote is on disk (before anyone
    /// is told the changes are kept).
    public func flush() throws(StagingError) {
        try syncFilesystem(of: folder, step: "flushing the staged changes in")
    }

    /// When a staged run has ended: a clone the command left unchanged goes
    /// (the next run clones the folder as it is then, not a stale copy; no
    /// flush is needed for that, a clone that survives a crash holds no
    /// change); one with changes is flushed. Whether changes are staged.
    /// `host`: the granted folder, to say what changed outside (the list
    /// is kept for the next `changes(host:)`, the end-of-run review's);
    /// `since`: when the run started (ns since the epoch, realtime): a clone
    /// in which nothing changed since (no ctime, which no process sets, at
    /// or after it) needs no flush, the run before flushed it.
    public func settleAfterRun(host: OwnedDescriptor? = nil, since start: Int64? = nil) throws(StagingError) -> Bool {
        guard hasClone else { return false }
        // A clone that cannot be listed (too deep, say) is kept, flushed: `review` says why.
        guard let listed = try? changes(host: host) else {
            try flush()
            return true
        }
        if listed.changes.isEmpty {
            try discard(durable: false)
            return false
        }
        settled = listed
        // A second of margin: timestamps may be coarser than the clock read.
        if start.map({ start in listed.found.values.contains { $0.status.changed >= start - 1_000_000_000 } }) ?? true {
            try flush()
        }
        return true
    }

    /// The list `settleAfterRun` made, for the first `changes(host:)` after it.
    private var settled: StagedChanges?

    /// Every staged change, by the clone against its manifest. `host`: the
    /// granted folder (open), to say which changed outside since staged.
    public func changes(host: OwnedDescriptor?) throws(StagingError) -> StagedChanges {
        // Just after a run, nothing else could have changed the clone (this holder has it alone).
        if let listed = settled {
            settled = nil
            return listed
        }
        let (tree, manifest) = try openClone()
        return try ChangeList.compute(tree: tree, manifest: manifest, host: host)
    }

    /// The clone and its manifest.
    func openClone() throws(StagingError) -> (tree: OwnedDescriptor, manifest: Manifest) {
        guard hasClone else { throw .nothingStaged(app: app.rawValue) }
        let currentPath = Array((shown + "/current").utf8)
        let current = try TreeWalk.openFolder(Array("current".utf8), in: folder, path: currentPath)
        let tree = try TreeWalk.openFolder(Array("tree".utf8), in: current, path: currentPath + Array("/tree".utf8))
        guard let bytes = try readPrivate("current/manifest", limit: 1 << 30) else { throw .damaged(file: "manifest", problem: "it is missing") }
        return (tree, try Manifest.decode(bytes))
    }

    /// Replaces the manifest (after some changes were applied or rejected).
    func writeManifest(_ manifest: Manifest) throws(StagingError) {
        let current = try TreeWalk.openFolder(Array("current".utf8), in: folder, path: Array((shown + "/current").utf8))
        try write("manifest", in: current, manifest.encoded())
    }

    /// The staged item's bytes (a file's, at most `limit`; a link's text),
    /// nil when there is none at `path`.
    public func stagedBytes(_ path: [UInt8], limit: Int) throws(StagingError) -> [UInt8]? {
        let (tree, _) = try openClone()
        return try Self.regularFileBytes(path, in: tree, limit: limit)
    }

    /// The bytes of the file at `path` below `folder` (at most `limit`), or
    /// a link's text; reached through no link; nil when there is neither.
    public static func regularFileBytes(_ path: [UInt8], in folder: OwnedDescriptor, limit: Int) throws(StagingError) -> [UInt8]? {
        guard let item = HostItem.locate(path, in: folder), let status = try? item.status() else { return nil }
        if status.st_mode & S_IFMT == S_IFLNK { return ChangeList.linkText(path, in: folder) }
        guard let file = HostItem.open(path, in: folder, flags: O_RDONLY) else { return nil }
        // One byte past the size: a file that grew meanwhile reads as larger than the limit.
        return try FileBytes.read(file, upTo: min(limit, max(Int(status.st_size), 0) + 1), path: path)
    }

    /// Throws every staged change away: the clone and its manifest go.
    public func discard() throws(StagingError) {
        try discard(durable: true)
    }

    private func discard(durable: Bool) throws(StagingError) {
        // Renamed away first: a discard cut short leaves no half clone that counts.
        var status = stat()
        if "current".withCString({ fstatat(folder.rawValue, $0, &status, AT_SYMLINK_NOFOLLOW) }) == 0 {
            try removeIfThere("discarded")
            guard "current".withCString({ current in "discarded".withCString { renameat(folder.rawValue, current, folder.rawValue, $0) } }) == 0 else {
                throw .system(step: "discarding", path: Array((shown + "/current").utf8), errno: Errno(rawValue: errno))
            }
            if durable { try syncFilesystem(of: folder, step: "flushing") }
        }
        try removeIfThere("discarded")
        try removeIfThere("new")
        _ = "grant".withCString { unlinkat(folder.rawValue, $0, 0) }
    }

    // MARK: Files of the area

    private func makeFolder(_ name: String, in parent: OwnedDescriptor) throws(StagingError) -> OwnedDescriptor {
        guard name.withCString({ mkdirat(parent.rawValue, $0, 0o700) }) == 0 else {
            throw .system(step: "making", path: Array((shown + "/" + name).utf8), errno: Errno(rawValue: errno))
        }
        return try TreeWalk.openFolder(Array(name.utf8), in: parent, path: Array((shown + "/" + name).utf8))
    }

    /// Replaces `name` whole; `durable`: flushed, and its folder (else the
    /// caller flushes the filesystem before it counts on it).
    private func write(_ name: String, in parent: OwnedDescriptor, _ bytes: [UInt8], durable: Bool = true) throws(StagingError) {
        let temporary = name + ".new"
        _ = temporary.withCString { unlinkat(parent.rawValue, $0, 0) }
        let fd = temporary.withCString { openat(parent.rawValue, $0, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw .system(step: "writing", path: Array((shown + "/" + name).utf8), errno: Errno(rawValue: errno)) }
        let file = OwnedDescriptor(taking: fd)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.write(file.rawValue, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                throw .system(step: "writing", path: Array((shown + "/" + name).utf8), errno: Errno(rawValue: errno))
            }
            offset += written
        }
        if durable, fsync(file.rawValue) != 0 { throw .system(step: "flushing", path: Array((shown + "/" + name).utf8), errno: Errno(rawValue: errno)) }
        guard temporary.withCString({ old in name.withCString { renameat(parent.rawValue, old, parent.rawValue, $0) } }) == 0 else {
            throw .system(step: "writing", path: Array((shown + "/" + name).utf8), errno: Errno(rawValue: errno))
        }
        if durable, fsync(parent.rawValue) != 0 { throw .system(step: "flushing", path: Array(shown.utf8), errno: Errno(rawValue: errno)) }
    }

    /// A private file of the area (relative path), read whole; nil when missing.
    private func readPrivate(_ name: String, limit: Int) throws(StagingError) -> [UInt8]? {
        let path = Array((shown + "/" + name).utf8)
        let fd = name.withCString { openat(folder.rawValue, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) }
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw .system(step: "opening", path: path, errno: Errno(rawValue: errno))
        }
        let file = OwnedDescriptor(taking: fd)
        var status = stat()
        guard fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == geteuid(), status.st_mode & 0o077 == 0 else {
            throw .damaged(file: name, problem: "not a private regular file of this user's")
        }
        guard Int64(status.st_size) <= Int64(limit) else { throw .damaged(file: name, problem: "larger than \(limit) bytes") }
        return try FileBytes.read(file, upTo: Int(status.st_size), path: path)
    }

    private func syncFilesystem(of descriptor: OwnedDescriptor, step: String) throws(StagingError) {
        guard csb_syncfs(descriptor.rawValue) == 0 else { throw .system(step: step, path: Array(shown.utf8), errno: Errno(rawValue: errno)) }
    }

    private func removeIfThere(_ name: String) throws(StagingError) {
        try TreeRemoval.remove(Array(name.utf8), in: folder, shown: Array((shown + "/" + name).utf8))
    }
}

/// Removes a tree of the area's own: any depth (a command can nest folders
/// 10,000 deep in its clone), any mode it set, holding two descriptors.
enum TreeRemoval {
    static func remove(_ name: [UInt8], in parent: OwnedDescriptor, shown: [UInt8]) throws(StagingError) {
        var status = stat()
        guard name.withCString({ fstatat(parent.rawValue, $0, &status, AT_SYMLINK_NOFOLLOW) }) == 0 else {
            if errno == ENOENT { return }
            throw .system(step: "reading", path: shown, errno: Errno(rawValue: errno))
        }
        guard status.st_mode & S_IFMT == S_IFDIR else {
            guard name.withCString({ unlinkat(parent.rawValue, $0, 0) }) == 0 else { throw .system(step: "removing", path: shown, errno: Errno(rawValue: errno)) }
            return
        }
        // Down through the first folder left at each level; up (by "..", the
        // tree is this holder's alone now) once a folder is empty.
        _ = name.withCString { fchmodat(parent.rawValue, $0, 0o700, 0) }
        var names = [name]
        var current = try TreeWalk.openFolder(name, in: parent, path: shown)
        while true {
            var inner: [UInt8]?
            for entry in try TreeWalk.names(in: current, path: shown) {
                var status = stat()
                guard entry.withCString({ fstatat(current.rawValue, $0, &status, AT_SYMLINK_NOFOLLOW) }) == 0 else { continue }
                if status.st_mode & S_IFMT == S_IFDIR {
                    inner = entry
                    break
                }
                guard entry.withCString({ unlinkat(current.rawValue, $0, 0) }) == 0 || errno == ENOENT else {
                    throw .system(step: "removing a file in", path: shown, errno: Errno(rawValue: errno))
                }
            }
            if let inner {
                _ = inner.withCString { fchmodat(current.rawValue, $0, 0o700, 0) }
                current = try TreeWalk.openFolder(inner, in: current, path: shown)
                names.append(inner)
                continue
            }
            let done = names.removeLast()
            let up = names.isEmpty ? parent : try TreeWalk.openFolder(Array("..".utf8), in: current, path: shown)
            guard done.withCString({ unlinkat(up.rawValue, $0, AT_REMOVEDIR) }) == 0 else {
                throw .system(step: "removing a folder in", path: shown, errno: Errno(rawValue: errno))
            }
            if names.isEmpty { return }
            current = up
        }
    }
}

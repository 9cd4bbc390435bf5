@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// A conflict version, as NSFileVersion exposes them: when two sides changed
/// a file concurrently, the losing side's contents are kept beside it, in
/// `D/.sandboxed-run-versions/NAME/SECONDS.NANOSECONDS-COMPUTER`, named by
/// the modification time they had and the side that saved them.
public struct FileVersion: Equatable, Sendable {
    /// The file this is a version of.
    public let item: FilePath
    /// The version's file name: `SECONDS.NANOSECONDS-COMPUTER`.
    public let identifier: String
    /// When its side last changed it (for last-writer-wins).
    public let modified: timespec
    /// The side that saved it (`localizedNameOfSavingComputer`).
    public let savingComputer: String

    public static func == (a: FileVersion, b: FileVersion) -> Bool { a.item == b.item && a.identifier == b.identifier }

    static let folderName = ".sandboxed-run-versions"
    /// Versions are whole files read into memory: larger ones are refused.
    public static let largest = 64 << 20

    /// The unresolved conflict versions of `item`, oldest first. Entries that
    /// are not versions (a link, a FIFO, a name of another form) are skipped.
    public static func unresolvedConflictVersions(of item: FilePath) throws -> [FileVersion] {
        try unresolvedConflictVersions(of: FileCoordinator.Location(item))
    }

    public static func unresolvedConflictVersions(of location: FileCoordinator.Location) throws -> [FileVersion] {
        let item = location.path
        guard let folder = try versionsFolder(of: location, create: false) else { return [] }
        // The stream's own copy, which closedir closes; `folder` stays ours.
        guard let stream = try? directoryStream(taking: folder.duplicate()) else { return [] }
        defer { closedir(stream) }
        let owner = Trust.itemStatus(location)
        var versions: [FileVersion] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            guard entry.pointee.d_type == DT_REG, let version = parse(name, item: item) else { continue }
            // One that someone who may not write the item could have put there is no version of it.
            var status = stat()
            guard fstatat(folder.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) == 0, Trust.problem(with: status, item: owner) == nil else { continue }
            versions.append(version)
        }
        return versions.sorted { ($0.modified.tv_sec, $0.modified.tv_nsec) < ($1.modified.tv_sec, $1.modified.tv_nsec) }
    }

    /// Keeps `contents` as a conflict version of `item`, durably (flushed,
    /// and its folders), with the item's owner and permissions: a version is
    /// never more readable than the file it is a version of. The caller
    /// coordinates the item (the sync daemon holds its write lock).
    @discardableResult
    public static func add(to item: FilePath, contents: [UInt8], modified: timespec, savingComputer: String) throws -> FileVersion {
        try add(to: FileCoordinator.Location(item), contents: contents, modified: modified, savingComputer: savingComputer)
    }

    @discardableResult
    public static func add(to location: FileCoordinator.Location, contents: [UInt8], modified: timespec, savingComputer: String) throws -> FileVersion {
        let fd = csb_open_regular(location.folder.rawValue, location.name, O_RDONLY, 0)
        guard fd >= 0 else {
            throw CoordinationError.system(operation: "keeping a conflict version of", path: location.path, errno: Errno(rawValue: errno))
        }
        let opened = OwnedDescriptor(taking: fd)
        let original: stat
        do { original = try opened.status() } catch { throw CoordinationError.system(operation: "fstat", path: location.path, errno: error) }
        return try add(to: location, contents: contents, modified: modified, savingComputer: savingComputer, like: original,
                       acl: AccessControl.read(AccessControl.access, of: opened.rawValue))
    }

    /// `acl`: the item's access ACL, read from its descriptor.
    @discardableResult
    static func add(to location: FileCoordinator.Location, contents: [UInt8], modified: timespec, savingComputer: String,
                    like original: stat, acl: AccessControl.Found) throws -> FileVersion {
        let item = location.path
        guard let folder = try versionsFolder(of: location, create: true, like: original, acl: acl) else { throw CoordinationError.notARegularFile(item) }
        // Written under a temporary name and renamed: a daemon killed meanwhile leaves no torn version.
        let temporary = ItemNames.terminated(ItemNames.temporarySuffix())
        let fd = csb_open_regular(folder.rawValue, temporary, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { throw CoordinationError.system(operation: "keeping a conflict version of", path: item, errno: Errno(rawValue: errno)) }
        let file = OwnedDescriptor(taking: fd)
        do {
            try FileCoordinator.writeAll(contents, to: file.rawValue, path: item)
            try Durably.match(file.rawValue, to: original, acl: acl, path: item)
            try Durably.sync(file.rawValue, path: item)
            let version = try place(temporary, from: folder, into: folder, modified: modified, savingComputer: savingComputer, item: item)
            try Durably.syncFolder(folder, path: item)
            return version
        } catch {
            _ = unlinkat(folder.rawValue, temporary, 0)
            throw error
        }
    }

    /// Keeps the file `name` of the item's folder (the daemon's copy of an
    /// evicted file that a writer outside the protocol re-created) as a
    /// conflict version: renamed, never copied, so it keeps its inode, owner
    /// and mode. The caller holds the folder lock and the item's write lock.
    @discardableResult
    static func adopt(_ name: [CChar], besides location: FileCoordinator.Location, savingComputer: String) throws -> FileVersion {
        let item = location.path
        let fd = csb_open_regular(location.folder.rawValue, name, O_RDONLY, 0)
        guard fd >= 0 else { throw FileCoordinator.openingError(Errno(rawValue: errno), path: location.named(name).path) }
        let copy = OwnedDescriptor(taking: fd)
        let original: stat
        do { original = try copy.status() } catch { throw CoordinationError.system(operation: "fstat", path: location.named(name).path, errno: error) }
        let acl = AccessControl.read(AccessControl.access, of: copy.rawValue)
        guard let folder = try versionsFolder(of: location, create: true, like: original, acl: acl) else { throw CoordinationError.notARegularFile(item) }
        let version = try place(name, from: location.folder, into: folder, modified: original.st_mtim, savingComputer: savingComputer, item: item)
        try Durably.syncFolder(folder, path: item)
        try Durably.syncFolder(location.folder, path: item)
        return version
    }

    /// Renames `name` in `from` to the version's name in `folder`, never over
    /// another version: the same instant twice gets `-2`, `-3`... after the side.
    private static func place(_ name: [CChar], from: OwnedDescriptor, into folder: OwnedDescriptor, modified: timespec,
                              savingComputer: String, item: FilePath) throws -> FileVersion {
        let computer = String(savingComputer.filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }.prefix(32))
        let side = computer.isEmpty ? "unknown" : computer
        let stamp = "\(modified.tv_sec).\(String(modified.tv_nsec + 1_000_000_000).dropFirst())-"
        for attempt in 1...100 {
            let identifier = stamp + side + (attempt == 1 ? "" : "-\(attempt)")
            if try Durably.renameNoReplace(from, name, folder, Array(identifier.utf8CString), path: item) {
                return FileVersion(item: item, identifier: identifier, modified: modified, savingComputer: side)
            }
        }
        throw CoordinationError.system(operation: "keeping a conflict version of", path: item, errno: .fileExists)
    }

    /// Removes temporaries that a daemon killed while keeping a version left
    /// in the item's versions folder. The caller holds the item's write lock,
    /// which every party writing one holds.
    static func removeLeftovers(of location: FileCoordinator.Location) {
        guard let folder = try? versionsFolder(of: location, create: false), let stream = try? directoryStream(taking: folder.duplicate()) else { return }
        defer { closedir(stream) }
        let owner = Trust.itemStatus(location)
        var leftovers: [[CChar]] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.bindMemory(to: UInt8.self).prefix { $0 != 0 }) }
            if ItemNames.temporaryStem([UInt8(ascii: ".")] + name) == [UInt8(ascii: ".")] { leftovers.append(ItemNames.terminated(name)) }
        }
        for name in leftovers {
            var status = stat()
            guard fstatat(folder.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) == 0, Trust.problem(with: status, item: owner) == nil else { continue }
            _ = unlinkat(folder.rawValue, name, 0)
        }
    }

    /// The version's bytes.
    public func contents() throws -> [UInt8] {
        try contents(at: FileCoordinator.Location(item))
    }

    /// The version's bytes, for the item at `location`.
    public func contents(at location: FileCoordinator.Location) throws -> [UInt8] {
        guard let folder = try Self.versionsFolder(of: location, create: false) else { throw CoordinationError.noSuchVersion(item, identifier) }
        let fd = csb_open_regular(folder.rawValue, identifier, O_RDONLY, 0)
        guard fd >= 0 else { throw CoordinationError.noSuchVersion(item, identifier) }
        let file = OwnedDescriptor(taking: fd)
        if let status = try? file.status(), let problem = Trust.problem(with: status, item: Trust.itemStatus(location)) {
            throw CoordinationError.untrusted(item.pushing(FilePath(identifier)), problem: problem)
        }
        return try Self.readAll(file, path: item)
    }

    /// Which contents survive a resolution.
    public enum Choice: Sendable, Equatable {
        /// The file as it is.
        case current
        /// This version replaces the file.
        case version(String)
        /// Last writer wins, by modification time: the file or the newest version.
        case newest
    }

    /// Resolves `item`'s conflict: the chosen contents stay (replacing the
    /// file, coordinated), every conflict version is removed. Returns what was kept.
    @discardableResult
    public static func resolve(_ item: FilePath, keeping choice: Choice = .newest, coordinator: FileCoordinator = FileCoordinator()) throws -> Choice {
        try resolve(FileCoordinator.Location(item), keeping: choice, coordinator: coordinator)
    }

    @discardableResult
    public static func resolve(_ location: FileCoordinator.Location, keeping choice: Choice = .newest, coordinator: FileCoordinator = FileCoordinator()) throws -> Choice {
        let item = location.path
        let versions = try unresolvedConflictVersions(of: location)
        var kept = choice
        if choice == .newest {
            var status = stat()
            let current = fstatat(location.folder.rawValue, location.name, &status, AT_SYMLINK_NOFOLLOW) == 0 ? status.st_mtim : timespec(tv_sec: 0, tv_nsec: 0)
            if let newest = versions.last, (newest.modified.tv_sec, newest.modified.tv_nsec) > (current.tv_sec, current.tv_nsec) {
                kept = .version(newest.identifier)
            } else {
                kept = .current
            }
        }
        if case .version(let identifier) = kept {
            guard let version = versions.first(where: { $0.identifier == identifier }) else { throw CoordinationError.noSuchVersion(item, identifier) }
            try coordinator.replace(contentsOf: location, with: try version.contents(at: location))
        }
        if let folder = try versionsFolder(of: location, create: false) {
            for version in versions { _ = unlinkat(folder.rawValue, version.identifier, 0) }
            if let all = try? versionsRoot(in: location, create: false) {
                _ = unlinkat(all.rawValue, location.name, AT_REMOVEDIR)  // only when empty
                _ = unlinkat(location.folder.rawValue, folderName, AT_REMOVEDIR)
            }
        }
        return kept
    }

    // MARK: Storage

    private static func parse(_ name: String, item: FilePath) -> FileVersion? {
        guard let dash = name.firstIndex(of: "-"), let dot = name.firstIndex(of: "."), dot < dash,
              let seconds = Int(name[..<dot]), let nanoseconds = Int(name[name.index(after: dot)..<dash]),
              name[name.index(after: dot)..<dash].count == 9, seconds >= 0 else { return nil }
        return FileVersion(item: item, identifier: name, modified: timespec(tv_sec: seconds, tv_nsec: nanoseconds),
                           savingComputer: String(name[name.index(after: dash)...]))
    }

    /// The folder of every item's versions, beside the items. One this call
    /// makes is no more open than the folder it is in (whose entries it
    /// names): that folder's owner, its ACL (or mode) without write for
    /// anyone else. One that is there already is used only if its owner is
    /// the item's, this process's user or the folder's owner (who may
    /// rename anything in the folder anyway), it is no more writable than
    /// the folder, and it has no default ACL.
    private static func versionsRoot(in location: FileCoordinator.Location, create: Bool) throws -> OwnedDescriptor? {
        let parent = location.folder
        var status = stat()
        guard fstat(parent.rawValue, &status) == 0 else {
            throw CoordinationError.system(operation: "fstat", path: location.path.removingLastComponent(), errno: Errno(rawValue: errno))
        }
        let owners = [Trust.itemStatus(location)?.st_uid, geteuid(), status.st_uid].compactMap { $0 }
        let acl: AccessControl.Found = create ? AccessControl.read(AccessControl.access, of: parent.rawValue) : .none
        return try openFolder(Array(folderName.utf8CString), in: parent, path: location.path.removingLastComponent(), create: create,
                              mode: (status.st_mode & 0o755) | 0o700, owner: (status.st_uid, status.st_gid),
                              acl: acl, aclIsFiles: false, trusted: owners, parent: status)
    }

    /// The folder of the item's versions. One this call makes has the item's
    /// owner (when this process may give it; else it is private to this
    /// process) and may be listed by whoever may read the item (its ACL, or
    /// its mode: a 0600 item's versions are in a 0700 folder). One that is
    /// there already is used only if its owner is the item's or this
    /// process's user, it is no more writable than the item's folder, and
    /// it has no default ACL: otherwise its maker could read or remove the
    /// versions.
    static func versionsFolder(of location: FileCoordinator.Location, create: Bool, like original: stat? = nil,
                               acl: AccessControl.Found = .none) throws -> OwnedDescriptor? {
        guard let root = try versionsRoot(in: location, create: create) else { return nil }
        var parent = stat()
        guard fstat(location.folder.rawValue, &parent) == 0 else {
            throw CoordinationError.system(operation: "fstat", path: location.path.removingLastComponent(), errno: Errno(rawValue: errno))
        }
        let owners = [(original ?? Trust.itemStatus(location))?.st_uid, geteuid()].compactMap { $0 }
        return try openFolder(location.name, in: root, path: location.path.removingLastComponent().pushing(FilePath(folderName)), create: create,
                              mode: Durably.folderMode(for: original?.st_mode ?? 0o600), owner: original.map { ($0.st_uid, $0.st_gid) },
                              acl: acl, aclIsFiles: true, trusted: owners, parent: parent)
    }

    /// A folder beneath `parent`, never through a link. One this call makes
    /// loses the ACLs it inherited, gets `owner` when this process may give
    /// it, then the ACL `acl` made a folder's (`AccessControl.forFolder`) or
    /// `mode` (whatever the umask), or, when it cannot have either as its
    /// original's, only its owner's bits; it is flushed into `parent`. One
    /// that was there is checked (`Trust.folderProblem`) against `trusted`
    /// owners and the item's folder's status.
    private static func openFolder(_ name: [CChar], in parent: OwnedDescriptor, path: FilePath, create: Bool, mode: mode_t,
                                   owner: (uid_t, gid_t)?, acl: AccessControl.Found, aclIsFiles: Bool,
                                   trusted: [uid_t], parent folderStatus: stat) throws -> OwnedDescriptor? {
        let display = path.pushing(FileCoordinator.display(name))
        var made = false
        if create {
            if mkdirat(parent.rawValue, name, 0o700) == 0 {
                made = true
            } else if errno != EEXIST {
                throw CoordinationError.system(operation: "creating", path: display, errno: Errno(rawValue: errno))
            }
        }
        let bytes = name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        let folder: OwnedDescriptor
        do { folder = try .openFolder(bytes, relativeTo: parent, follow: false, use: .read) } catch {
            if error == .noSuchFileOrDirectory && !create { return nil }
            throw CoordinationError.notARegularFile(display)
        }
        let fd = folder.rawValue
        var status = stat()
        // Ours only if this process owns what the name holds now: another folder swapped in meanwhile is checked as any other.
        if made, fstat(fd, &status) != 0 || status.st_uid != geteuid() { made = false }
        guard made else {
            if let problem = Trust.folderProblem(folder, owners: trusted, parent: folderStatus) {
                throw CoordinationError.untrusted(display, problem: problem)
            }
            return folder
        }
        guard AccessControl.removeInherited(from: fd, folder: true) else {
            _ = fchmod(fd, 0o700)
            throw CoordinationError.system(operation: "removing the ACLs inherited by", path: display, errno: Errno(rawValue: errno))
        }
        if let owner, status.st_uid != owner.0 || status.st_gid != owner.1 {
            _ = fchown(fd, owner.0, owner.1)  // root may; others keep it private below
        }
        var final = mode & 0o700
        if fstat(fd, &status) == 0, owner.map({ status.st_uid == $0.0 && status.st_gid == $0.1 }) ?? true {
            final = mode
            switch acl {
            case .none: break
            case .list(let list):
                if let folderACL = AccessControl.forFolder(list, file: aclIsFiles), AccessControl.apply(folderACL, to: fd) { final = 0 } else { final = mode & 0o700 }
            case .unknown: final = mode & 0o700
            }
        }
        if final != 0 {
            do { _ = try syscallRetrying { fchmod(fd, final) } } catch {
                throw CoordinationError.system(operation: "setting the permissions of", path: display, errno: error)
            }
        }
        try Durably.sync(fd, path: display)
        try Durably.syncFolder(parent, path: display)
        return folder
    }

    /// The whole file, refused (as not a file to handle) above `limit` bytes.
    static func readAll(_ file: OwnedDescriptor, path: FilePath, limit: Int = largest) throws -> [UInt8] {
        try readAll(descriptor: file.rawValue, path: path, limit: limit)
    }

    /// Reads through `descriptor` itself (pread: its offset is untouched),
    /// so a locked file is never duplicated: a copy inherited by a program
    /// spawned meanwhile would keep its lock.
    static func readAll(descriptor: CInt, path: FilePath, limit: Int = largest) throws -> [UInt8] {
        var status = stat()
        guard fstat(descriptor, &status) == 0, Int(status.st_size) <= limit else { throw CoordinationError.notARegularFile(path) }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress! + offset, $0.count - offset, off_t(offset)) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            offset += count
        }
        return Array(bytes[0..<offset])
    }
}

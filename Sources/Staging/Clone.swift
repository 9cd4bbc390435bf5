@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// Copies a granted folder into a staging tree, and says what it copied.
/// Folders, regular files and links are made again with the same names,
/// permission bits (never set-id), times and, as root, owners; a file's
/// data is a reflink where the filesystem shares extents. A FIFO, socket or
/// device is recorded and not made: the command does not see it, and
/// nothing is ever applied to it. Hard links in the granted folder become
/// separate files in the clone.
enum Clone {
    /// Tries again this many times when a file changes while it is copied
    /// (a sync daemon writing it), then gives up.
    static let attempts = 5

    static func make(from host: OwnedDescriptor, into tree: OwnedDescriptor) throws(StagingError) -> Manifest {
        var manifest = Manifest()
        let rootStatus: stat
        do { rootStatus = try host.status() } catch { throw .system(step: "reading", path: [], errno: error) }
        manifest.entries.append(ManifestEntry(path: [], kind: .folder, host: Status(rootStatus), clone: [], cloneStatus: Status(rootStatus)))
        try copyContents(of: host, into: tree, status: rootStatus, prefix: [], index: 0, entries: &manifest.entries)
        return manifest
    }

    /// Copies `name` of `hostParent` (a file, link, special file or whole
    /// folder) to the same name in `cloneParent`: the manifest entries of
    /// what it copied, at `path` and below.
    static func copyItem(_ name: [UInt8], from hostParent: OwnedDescriptor, into cloneParent: OwnedDescriptor, path: [UInt8]) throws(StagingError) -> [ManifestEntry] {
        var status = stat()
        guard name.withCString({ fstatat(hostParent.rawValue, $0, &status, AT_SYMLINK_NOFOLLOW) }) == 0 else {
            if errno == ENOENT { return [] }
            throw .system(step: "reading", path: path, errno: Errno(rawValue: errno))
        }
        var entries: [ManifestEntry] = []
        let entry = TreeWalk.Entry(parent: hostParent.rawValue, name: name, path: path, status: status)
        if let folder = try copy(entry, into: cloneParent, entries: &entries) {
            let host = try TreeWalk.openFolder(name, in: hostParent, path: path)
            try copyContents(of: host, into: folder, status: status, prefix: path, index: 0, entries: &entries)
        }
        return entries
    }

    /// Copies the contents of a folder, then gives its clone the folder's
    /// bits and times (a 0555 folder could not have been filled otherwise).
    private static func copyContents(
        of host: OwnedDescriptor, into clone: OwnedDescriptor, status: stat, prefix: [UInt8], index: Int, entries: inout [ManifestEntry]
    ) throws(StagingError) {
        func joined(_ path: [UInt8]) -> [UInt8] { prefix.isEmpty ? path : prefix + [UInt8(ascii: "/")] + path }
        try TreeWalk.walk(host, context: (clone: clone, index: index, status: status)) { (entry, parent) throws(StagingError) -> (clone: OwnedDescriptor, index: Int, status: stat)? in
            let placed = TreeWalk.Entry(parent: entry.parent, name: entry.name, path: joined(entry.path), status: entry.status)
            guard let folder = try copy(placed, into: parent.clone, entries: &entries) else { return nil }
            return (folder, entries.count - 1, entry.status)
        } leave: { (entry, _, context) throws(StagingError) in
            try finishFolder(context.clone, like: context.status, entry: &entries[context.index], path: entry.map { joined($0.path) } ?? prefix)
        }
    }

    /// Makes the clone of one item in `folder` and records it; a folder is
    /// returned open (its contents and its entry's clone identity to come).
    private static func copy(_ entry: TreeWalk.Entry, into folder: OwnedDescriptor, entries: inout [ManifestEntry]) throws(StagingError) -> OwnedDescriptor? {
        let status = entry.status
        let owner = geteuid() == 0
        switch entry.kind {
        case .folder:
            let made = entry.name.withCString { mkdirat(folder.rawValue, $0, 0o700) }
            guard made == 0 else { throw .system(step: "making the clone of", path: entry.path, errno: Errno(rawValue: errno)) }
            let clone = try TreeWalk.openFolder(entry.name, in: folder, path: entry.path)
            entries.append(ManifestEntry(path: entry.path, kind: .folder, host: Status(status), clone: [], cloneStatus: Status(status)))
            return clone
        case .file:
            let (clone, hostStatus) = try copyFile(entry, into: folder, owner: owner)
            entries.append(ManifestEntry(path: entry.path, kind: .file, host: hostStatus, clone: try identity(of: clone, path: entry.path), cloneStatus: try statusOf(clone, entry.path)))
        case .link:
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let length = entry.name.withCString { readlinkat(entry.parent, $0, &buffer, Int(PATH_MAX)) }
            guard length >= 0 else { throw .system(step: "reading the link", path: entry.path, errno: Errno(rawValue: errno)) }
            buffer[length] = 0
            let made = entry.name.withCString { symlinkat(buffer, folder.rawValue, $0) }
            guard made == 0 else { throw .system(step: "making the clone of the link", path: entry.path, errno: Errno(rawValue: errno)) }
            let link = try TreeWalk.openItem(entry.name, in: folder.rawValue, path: entry.path)
            if owner { _ = csb_chown_fd(link.rawValue, status.st_uid, status.st_gid) }
            entries.append(ManifestEntry(path: entry.path, kind: .link, host: Status(status), clone: try identity(of: link, path: entry.path), cloneStatus: try statusOf(link, entry.path)))
        case .special:
            entries.append(ManifestEntry(path: entry.path, kind: .special, host: Status(status), clone: [], cloneStatus: Status(status)))
        }
        return nil
    }

    private static func finishFolder(_ clone: OwnedDescriptor, like status: stat, entry: inout ManifestEntry, path: [UInt8]) throws(StagingError) {
        if geteuid() == 0 { _ = csb_chown_fd(clone.rawValue, status.st_uid, status.st_gid) }
        guard fchmod(clone.rawValue, status.st_mode & 0o1777) == 0 else {
            throw .system(step: "setting the mode of the clone of", path: path, errno: Errno(rawValue: errno))
        }
        var times = [status.st_atim, status.st_mtim]
        _ = futimens(clone.rawValue, &times)
        entry.clone = try identity(of: clone, path: path)
        entry.cloneStatus = try statusOf(clone, path)
    }

    /// Copies one regular file, again while it changes under the copy.
    private static func copyFile(_ entry: TreeWalk.Entry, into folder: OwnedDescriptor, owner: Bool) throws(StagingError) -> (OwnedDescriptor, Status) {
        let source: OwnedDescriptor
        do {
            source = OwnedDescriptor(taking: try syscallRetrying {
                entry.name.withCString { openat(entry.parent, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) }
            })
        } catch .permissionDenied {
            throw .cannotStage(path: entry.path, reason: "this user may not read it (permission denied): make it readable, or run without review")
        } catch {
            throw .system(step: "opening", path: entry.path, errno: error)
        }
        let clone: OwnedDescriptor
        do {
            clone = OwnedDescriptor(taking: try syscallRetrying {
                entry.name.withCString { openat(folder.rawValue, $0, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) }
            })
        } catch {
            throw .system(step: "making the clone of", path: entry.path, errno: error)
        }
        for _ in 0..<attempts {
            let before = try statusOf(source, entry.path)
            guard before.inode == UInt64(entry.status.st_ino), before.mode & UInt32(S_IFMT) == UInt32(S_IFREG) else {
                throw .cannotStage(path: entry.path, reason: "it was replaced while it was being copied")
            }
            do {
                _ = try syscallRetrying { ftruncate(clone.rawValue, 0) }
                _ = try syscallRetrying { csb_copy_file_data(clone.rawValue, source.rawValue) }
            } catch {
                throw .system(step: "copying", path: entry.path, errno: error)
            }
            let after = try statusOf(source, entry.path)
            guard after.isUnchanged(as: before) else { continue }
            if owner { _ = csb_chown_fd(clone.rawValue, entry.status.st_uid, entry.status.st_gid) }
            guard fchmod(clone.rawValue, mode_t(after.mode) & 0o777) == 0 else {
                throw .system(step: "setting the mode of the clone of", path: entry.path, errno: Errno(rawValue: errno))
            }
            var st = stat()
            _ = fstat(source.rawValue, &st)
            var times = [st.st_atim, st.st_mtim]
            _ = futimens(clone.rawValue, &times)
            return (clone, after)
        }
        throw .cannotStage(path: entry.path, reason: "it kept changing while it was being copied (\(attempts) tries): try again when whatever writes it is done")
    }

    /// The identity of `name` in `folder`, read without opening it where
    /// the filesystem gives handles (a walk of thousands of items).
    static func identity(of name: [UInt8], in folder: CInt, path: [UInt8]) throws(StagingError) -> [UInt8] {
        var handle = csb_file_handle()
        var mount: CInt = 0
        if name.withCString({ csb_name_to_handle_at(folder, $0, &handle, &mount) }) == 0 { return encoded(handle) }
        return try identity(of: TreeWalk.openItem(name, in: folder, path: path), path: path)
    }

    private static func encoded(_ handle: csb_file_handle) -> [UInt8] {
        let type = withUnsafeBytes(of: handle.handle_type.littleEndian) { Array($0) }
        let bytes = withUnsafeBytes(of: handle.f_handle) { Array($0.prefix(Int(handle.handle_bytes))) }
        return [UInt8(ascii: "h")] + type + bytes
    }

    static func statusOf(_ descriptor: OwnedDescriptor, _ path: [UInt8]) throws(StagingError) -> Status {
        do { return Status(try descriptor.status()) } catch { throw .system(step: "reading", path: path, errno: error) }
    }

    /// The clone's identity: its file handle (type and bytes), which the
    /// filesystem never gives to another inode, unlike the inode number
    /// that ext4 hands on at once; or, where a filesystem has no handles,
    /// the inode number and birth time.
    static func identity(of descriptor: OwnedDescriptor, path: [UInt8]) throws(StagingError) -> [UInt8] {
        var handle = csb_file_handle()
        handle.handle_bytes = UInt32(MemoryLayout.size(ofValue: handle.f_handle))
        var mount: CInt = 0
        var fid: CInt = 0
        if csb_name_to_handle(descriptor.rawValue, &handle, &mount, &fid) == 0 { return encoded(handle) }
        var seconds: Int64 = 0
        var nanoseconds: UInt32 = 0
        guard csb_birth_time(descriptor.rawValue, &seconds, &nanoseconds) == 0 else {
            throw .cannotStage(path: path, reason: "its filesystem gives neither file handles nor birth times, so a renamed file could not be told from a new one")
        }
        let status = try statusOf(descriptor, path)
        return Array("i\(status.inode).\(seconds).\(nanoseconds)".utf8)
    }
}

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
        let owner = geteuid() == 0
        // Each folder's context: its clone, open, and its manifest index.
        try TreeWalk.walk(host, context: (clone: tree, index: 0)) { (entry, parent) throws(StagingError) -> (clone: OwnedDescriptor, index: Int)? in
            let status = entry.status
            switch entry.kind {
            case .folder:
                let made = entry.name.withCString { mkdirat(parent.clone.rawValue, $0, 0o700) }
                guard made == 0 else { throw .system(step: "making the clone of", path: entry.path, errno: Errno(rawValue: errno)) }
                let folder = try TreeWalk.openFolder(entry.name, in: parent.clone, path: entry.path)
                manifest.entries.append(ManifestEntry(path: entry.path, kind: .folder, host: Status(status), clone: [], cloneStatus: Status(status)))
                return (folder, manifest.entries.count - 1)
            case .file:
                let (clone, hostStatus) = try copyFile(entry, into: parent.clone, owner: owner)
                manifest.entries.append(ManifestEntry(path: entry.path, kind: .file, host: hostStatus, clone: try identity(of: clone, path: entry.path), cloneStatus: try statusOf(clone, entry.path)))
            case .link:
                var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let length = entry.name.withCString { readlinkat(entry.parent, $0, &buffer, Int(PATH_MAX)) }
                guard length >= 0 else { throw .system(step: "reading the link", path: entry.path, errno: Errno(rawValue: errno)) }
                buffer[length] = 0
                let made = entry.name.withCString { symlinkat(buffer, parent.clone.rawValue, $0) }
                guard made == 0 else { throw .system(step: "making the clone of the link", path: entry.path, errno: Errno(rawValue: errno)) }
                let link = try TreeWalk.openItem(entry.name, in: parent.clone.rawValue, path: entry.path)
                if owner { _ = csb_chown_fd(link.rawValue, status.st_uid, status.st_gid) }
                manifest.entries.append(ManifestEntry(path: entry.path, kind: .link, host: Status(status), clone: try identity(of: link, path: entry.path), cloneStatus: try statusOf(link, entry.path)))
            case .special:
                manifest.entries.append(ManifestEntry(path: entry.path, kind: .special, host: Status(status), clone: [], cloneStatus: Status(status)))
            }
            return nil
        } leave: { (entry, _, context) throws(StagingError) in
            // The folder's own bits and times once its contents are made
            // (a 0555 folder could not have been filled otherwise).
            let status = entry?.status ?? rootStatus
            let path = entry?.path ?? []
            if owner { _ = csb_chown_fd(context.clone.rawValue, status.st_uid, status.st_gid) }
            guard fchmod(context.clone.rawValue, status.st_mode & 0o1777) == 0 else {
                throw .system(step: "setting the mode of the clone of", path: path, errno: Errno(rawValue: errno))
            }
            var times = [status.st_atim, status.st_mtim]
            _ = futimens(context.clone.rawValue, &times)
            manifest.entries[context.index].clone = try identity(of: context.clone, path: path)
            manifest.entries[context.index].cloneStatus = try statusOf(context.clone, path)
        }
        return manifest
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
                _ = try syscallRetrying { lseek(source.rawValue, 0, SEEK_SET) }
                _ = try syscallRetrying { lseek(clone.rawValue, 0, SEEK_SET) }
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
        if csb_name_to_handle(descriptor.rawValue, &handle, &mount, &fid) == 0 {
            let type = withUnsafeBytes(of: handle.handle_type.littleEndian) { Array($0) }
            let bytes = withUnsafeBytes(of: handle.f_handle) { Array($0.prefix(Int(handle.handle_bytes))) }
            return [UInt8(ascii: "h")] + type + bytes
        }
        var seconds: Int64 = 0
        var nanoseconds: UInt32 = 0
        guard csb_birth_time(descriptor.rawValue, &seconds, &nanoseconds) == 0 else {
            throw .cannotStage(path: path, reason: "its filesystem gives neither file handles nor birth times, so a renamed file could not be told from a new one")
        }
        let status = try statusOf(descriptor, path)
        return Array("i\(status.inode).\(seconds).\(nanoseconds)".utf8)
    }
}

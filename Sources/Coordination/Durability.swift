@preconcurrency import Glibc
import CSyscalls
import SystemKit
import SystemPackage

/// What "exit 0 means durable" needs: fsync of files and folders, renames
/// that never replace, copies no more readable than their originals, and the
/// folder lock that serialises a name's coming into being with its eviction.
enum Durably {
    /// `fsync(2)`, EINTR retried: a file's bytes, or a folder's entries.
    static func sync(_ fd: CInt, path: FilePath, what: String = "flushing") throws {
        do { _ = try syscallRetrying { fsync(fd) } } catch {
            throw CoordinationError.system(operation: what, path: path, errno: error)
        }
    }

    /// `fsync(2)` of the folder `folder` names (an O_PATH descriptor cannot be synced: open it).
    static func syncFolder(_ folder: OwnedDescriptor, path: FilePath) throws {
        let readable: OwnedDescriptor
        do { readable = try folder.reopenedFolder() } catch {
            throw CoordinationError.system(operation: "opening the folder of", path: path, errno: error)
        }
        try sync(readable.rawValue, path: path, what: "flushing the folder of")
    }

    /// `renameat2(RENAME_NOREPLACE)`: false when the new name exists.
    static func renameNoReplace(_ from: OwnedDescriptor, _ old: [CChar], _ to: OwnedDescriptor, _ new: [CChar], path: FilePath) throws -> Bool {
        do {
            _ = try syscallRetrying { csb_rename_noreplace(from.rawValue, old, to.rawValue, new) }
            return true
        } catch .fileExists {
            return false
        } catch {
            throw CoordinationError.system(operation: "renaming beside", path: path, errno: error)
        }
    }

    /// Gives a copy the original's owner (when this process may) and its
    /// permissions, never the set-id bits: first it loses any ACL it
    /// inherited from its folder's default ACL, then it gets the original's
    /// access ACL verbatim (`acl`, read from the original's descriptor), or
    /// its permission bits when it has none. A copy this process cannot give
    /// the original's owner and group, or whose ACLs cannot be set as the
    /// original's, keeps only the owner's bits: it must not become readable
    /// by a group or users the original did not allow.
    static func match(_ fd: CInt, to original: stat, acl: AccessControl.Found, path: FilePath) throws {
        let clean = AccessControl.removeInherited(from: fd, folder: false)
        var copy = stat()
        guard fstat(fd, &copy) == 0 else { throw CoordinationError.system(operation: "fstat", path: path, errno: Errno(rawValue: errno)) }
        if copy.st_uid != original.st_uid || copy.st_gid != original.st_gid {
            _ = fchown(fd, original.st_uid, original.st_gid)  // root may; others get EPERM and narrow below
            guard fstat(fd, &copy) == 0 else { throw CoordinationError.system(operation: "fstat", path: path, errno: Errno(rawValue: errno)) }
        }
        var mode = original.st_mode & 0o777
        if copy.st_uid != original.st_uid || copy.st_gid != original.st_gid || !clean {
            mode &= 0o700
        } else {
            switch acl {
            case .none: break
            case .list(let list): if AccessControl.apply(list, to: fd) { return } else { mode &= 0o700 }
            case .unknown: mode &= 0o700
            }
        }
        do { _ = try syscallRetrying { fchmod(fd, mode) } } catch {
            throw CoordinationError.system(operation: "setting the permissions of", path: path, errno: error)
        }
    }

    /// A folder's mode for files of `mode`: search where it may read.
    static func folderMode(for mode: mode_t) -> mode_t {
        let read = mode & 0o444
        return (read | read >> 2 | 0o700) & 0o755
    }
}

/// The folder lock: `flock(LOCK_EX)` on the item's folder, on an open file
/// description of its own. A name's coming into being (a writer creating
/// NAME, the daemon materialising it) and its going to a placeholder (the
/// daemon evicting it) happen only under it, so "NAME and its placeholder
/// are both absent" cannot change between a party's look and its act.
/// Held for microseconds; a waiting writer does not hold it.
final class FolderLock {
    private let folder: OwnedDescriptor
    private var fd: CInt { folder.rawValue }

    /// nil when `deadline` passed first (then `busy` was the holder's
    /// problem, not an error) — `wait: false` tries once.
    init?(_ folder: OwnedDescriptor, path: FilePath, deadline: ContinuousClock.Instant?, wait: Bool = true) throws {
        do { self.folder = try folder.reopenedFolder() } catch {
            throw CoordinationError.system(operation: "opening the folder of", path: path, errno: error)
        }
        if deadline == nil && wait {
            do { _ = try syscallRetrying { flock(fd, LOCK_EX) } } catch {
                throw CoordinationError.system(operation: "locking the folder of", path: path, errno: error)
            }
            return
        }
        var pause: useconds_t = 50
        var tries = 0
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let error = Errno(rawValue: errno)
            guard error == .wouldBlock || error == .interrupted else {
                throw CoordinationError.system(operation: "locking the folder of", path: path, errno: error)
            }
            tries += 1
            if !wait || (deadline.map { ContinuousClock.now >= $0 } ?? false) {
                return nil
            }
            if tries <= 100 { sched_yield(); continue }
            usleep(pause)
            pause = min(pause * 2, 2_000)
        }
    }

}

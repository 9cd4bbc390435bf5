@preconcurrency import Glibc
import CSyscalls
import SystemPackage

extension OwnedDescriptor {
    /// How a folder is wanted.
    public enum FolderUse: Sendable {
        /// O_PATH: to name it, walk from it, rule it, compare it; no reading.
        case path
        /// O_RDONLY: also to list it, flush it (fsync) and lock it (flock).
        case read
    }

    /// The one way this package opens a folder: `name` (bytes, relative to
    /// `directory`, else to the working directory; absolute names ignore it),
    /// following a last link only with `follow`, and nothing but a folder
    /// (ENOTDIR otherwise, never opening what is not one for reading).
    public static func openFolder(
        _ name: [UInt8], relativeTo directory: OwnedDescriptor? = nil, follow: Bool, use: FolderUse = .path
    ) throws(Errno) -> OwnedDescriptor {
        let flags: CInt = switch use {
        case .path: CSB_O_PATH | O_DIRECTORY | O_CLOEXEC
        case .read: O_RDONLY | O_DIRECTORY | O_CLOEXEC
        }
        return OwnedDescriptor(taking: try syscallRetrying {
            (name + [0]).withUnsafeBytes { bytes in
                openat(directory?.rawValue ?? AT_FDCWD, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), flags | (follow ? 0 : O_NOFOLLOW))
            }
        })
    }

    /// The same, for a path.
    public static func openFolder(
        _ path: FilePath, relativeTo directory: OwnedDescriptor? = nil, follow: Bool, use: FolderUse = .path
    ) throws(Errno) -> OwnedDescriptor {
        try openFolder(path.bytes, relativeTo: directory, follow: follow, use: use)
    }

    /// This folder again, opened for reading (an O_PATH descriptor cannot be
    /// listed, flushed or locked).
    public func reopenedFolder() throws(Errno) -> OwnedDescriptor {
        try Self.openFolder([UInt8(ascii: ".")], relativeTo: self, follow: false, use: .read)
    }

    /// The id of the mount this descriptor is on (statx, Linux 5.8), as
    /// /proc/PID/mountinfo numbers it; nil where the kernel gives none.
    public var mountID: UInt64? {
        var mount: UInt64 = 0, device: UInt64 = 0, inode: UInt64 = 0
        var root: CInt = 0
        return csb_mount_facts(rawValue, &mount, &root, &device, &inode) == 0 ? mount : nil
    }
}

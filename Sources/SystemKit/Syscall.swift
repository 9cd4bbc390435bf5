@preconcurrency import Glibc
import SystemPackage

/// Calls a libc-style function (-1 and errno on failure) once, retrying
/// EINTR here so that no caller has to, and turns failure into `Errno`.
@inlinable
public func syscallRetrying<T: FixedWidthInteger>(_ body: () -> T) throws(Errno) -> T {
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = errno
        if code == EINTR { continue }
        throw Errno(rawValue: code)
    }
}

/// A kernel file descriptor with exactly one owner, closed when the owner goes away.
public final class OwnedDescriptor: @unchecked Sendable {
    public let rawValue: CInt

    public init(taking rawValue: CInt) {
        self.rawValue = rawValue
    }

    deinit {
        _ = Glibc.close(rawValue)
    }

    /// `fstat(2)`.
    public func status() throws(Errno) -> stat {
        var st = stat()
        _ = try syscallRetrying { fstat(rawValue, &st) }
        return st
    }
}

extension stat {
    /// The identity of an inode while something holds it open.
    package var inodeIdentity: InodeIdentity { InodeIdentity(device: UInt64(st_dev), inode: UInt64(st_ino)) }
    package var isDirectory: Bool { (st_mode & S_IFMT) == S_IFDIR }
    package var isSymlink: Bool { (st_mode & S_IFMT) == S_IFLNK }
    package var isRegularFile: Bool { (st_mode & S_IFMT) == S_IFREG }
}

/// (st_dev, st_ino): only meaningful while the inode is pinned by an open fd,
/// since ext4 reuses inode numbers at once.
package struct InodeIdentity: Hashable, Sendable {
    package let device: UInt64
    package let inode: UInt64

    package init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }
}

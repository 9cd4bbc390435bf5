@preconcurrency import Glibc
import SystemPackage
import Synchronization

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
///
/// Every test of every target runs in one process, in parallel, and the
/// kernel hands out the lowest free number: a descriptor closed twice, or a
/// -1 "owned" and later a real number stored over it, closes someone else's
/// file. So a negative number is refused, and giving the descriptor away
/// (`release()`) is explicit and happens once.
public final class OwnedDescriptor: @unchecked Sendable {
    /// The descriptor, or -1 once released (atomic: a second release must
    /// see the first, whichever thread made it).
    private let value: Atomic<CInt>

    public var rawValue: CInt {
        let raw = value.load(ordering: .acquiring)
        precondition(raw >= 0, "OwnedDescriptor used after release()")
        return raw
    }

    public init(taking rawValue: CInt) {
        // A failed open's -1 is the caller's bug; owning it would hide it.
        precondition(rawValue >= 0, "OwnedDescriptor(taking: \(rawValue)): not a descriptor")
        value = Atomic(rawValue)
    }

    deinit {
        let raw = value.load(ordering: .acquiring)
        if raw >= 0 { _ = Glibc.close(raw) }
    }

    /// A second descriptor for the same open file, close-on-exec from the
    /// start (a bare `dup` would be inherited by any program spawned
    /// meanwhile, and with it the file's locks or the seccomp listener), and
    /// numbered 3 or above so that it never becomes someone's stdio.
    public func duplicate() throws(Errno) -> OwnedDescriptor {
        let raw = rawValue
        return OwnedDescriptor(taking: try syscallRetrying { fcntl(raw, F_DUPFD_CLOEXEC, 3) })
    }

    /// Gives up ownership: returns the descriptor, which the caller (or the
    /// function it hands it to, such as `fdopendir`) must close; this object
    /// then closes nothing. Releasing twice is a programming error.
    public func release() -> CInt {
        let raw = value.exchange(-1, ordering: .acquiringAndReleasing)
        precondition(raw >= 0, "OwnedDescriptor released twice")
        return raw
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

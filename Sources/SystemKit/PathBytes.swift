@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// Paths are bytes on Linux: a folder's name need not be UTF-8, and a
/// `String` would replace what is not with U+FFFD, naming a folder that does
/// not exist. Paths that are stored, compared or handed on (bookmarks, the
/// ledger, grant rules, the environment) are `FilePath`s built from the
/// kernel's bytes; `Printable` shows them to people.
extension FilePath {
    /// The path with exactly these bytes (which hold no NUL).
    public init(bytes: [UInt8]) {
        self = (bytes.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { FilePath(platformString: $0.baseAddress!) }
    }

    /// The path's bytes, without a terminator.
    public var bytes: [UInt8] {
        withPlatformString { pointer in
            Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer)))
        }
    }

    /// The path as its bytes decode, when they are UTF-8; nil otherwise.
    public var exactString: String? { String(validating: bytes, as: UTF8.self) }

    /// `readlink(2)` of `/proc/self/fd/N`: the kernel's name for what `fd`
    /// holds, or nil when it has none (deleted, or not on a path).
    public static func ofDescriptor(_ fd: CInt) -> FilePath? {
        pathBytes(ofDescriptor: fd).map(FilePath.init(bytes:))
    }

    /// The same as bytes, without building a `FilePath` (the launch path
    /// calls it, and FilePath's generic parsing is slow at first use).
    public static func pathBytes(ofDescriptor fd: CInt) -> [UInt8]? {
        kernelName(Array("/proc/self/fd/".utf8) + Array(String(fd).utf8))
    }

    /// What a magic link of /proc names (`/proc/self/fd/N`, `/proc/self/exe`):
    /// an absolute path, or nil when there is none or the file was deleted
    /// (then "NAME (deleted)" names nothing, or a link someone planted).
    package static func kernelName(_ link: [UInt8]) -> [UInt8]? {
        try? kernelPath(link)
    }

    /// The same, saying why there is none: `.fileNameTooLong` when the path
    /// is longer than PATH_MAX (a folder walked to one name at a time can
    /// be: see `PathLimit`), `.noSuchFileOrDirectory` otherwise.
    public static func kernelPath(ofDescriptor fd: CInt) throws(Errno) -> [UInt8] {
        try kernelPath(Array("/proc/self/fd/".utf8) + Array(String(fd).utf8))
    }

    private static func kernelPath(_ link: [UInt8]) throws(Errno) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let (length, code) = buffer.withUnsafeMutableBytes { target in
            (link + [0]).withUnsafeBytes {
                (readlink($0.baseAddress!.assumingMemoryBound(to: CChar.self), target.baseAddress!.assumingMemoryBound(to: CChar.self), Int(PATH_MAX)), errno)
            }
        }
        if length < 0, code == ENAMETOOLONG { throw .fileNameTooLong }
        guard length > 0, buffer[0] == UInt8(ascii: "/") else { throw .noSuchFileOrDirectory }
        let path = Array(buffer[0..<length])
        if path.count > 10, path.suffix(10).elementsEqual(" (deleted)".utf8) { throw .noSuchFileOrDirectory }
        return path
    }
}

/// The kernel's limit on a path. A folder deeper than it can still be
/// reached one name at a time (as `SafeWalk` does), but the kernel cannot
/// name it (`/proc/self/fd/N`, getcwd) and no program can open it by its
/// path: it cannot be granted, recorded or handed on as a path.
public enum PathLimit {
    /// PATH_MAX, its final NUL included.
    public static let bytes = Int(PATH_MAX)

    /// What every command says about such a folder (then what to do).
    public static let exceeded = "its path is longer than the kernel's limit of \(bytes) bytes (PATH_MAX; ENAMETOOLONG, "
        + "File name too long): no program can open it by its path"

    /// A path too long to read in a message: its start and end, and its length.
    public static func shown(_ path: [UInt8]) -> String {
        guard path.count > 160 else { return Printable.path(bytes: path) }
        return Printable.path(bytes: Array(path.prefix(100))) + "…" + Printable.path(bytes: Array(path.suffix(40))) + " (\(path.count) bytes)"
    }
}

extension Printable {
    /// A path as a person should see it: its bytes, escaped.
    public static func path(_ path: FilePath) -> String { Printable.path(bytes: path.bytes) }
}

extension OwnedDescriptor {
    /// `openat(dir, path, O_PATH | O_CLOEXEC [| O_NOFOLLOW])`, with the path's bytes.
    public static func openPath(_ path: FilePath, follow: Bool, relativeTo directory: OwnedDescriptor? = nil) throws(Errno) -> OwnedDescriptor {
        OwnedDescriptor(taking: try syscallRetrying {
            path.withPlatformString { csb_open_path(directory?.rawValue ?? AT_FDCWD, $0, follow ? 1 : 0) }
        })
    }
}

@preconcurrency import Glibc
import CSyscalls
import Sandbox
import SystemPackage

/// A bookmark file. Apps keep bookmarks where they like, usually in their own
/// container, so the app may have planted anything at or along its path: a
/// FIFO (a read that never returns), a device (a write that replaces it), a
/// symlink to a folder it cannot write (the launcher would write there for it).
///
/// So the folder is found once, without following any symlink that lies in
/// a folder the app can write, and the file is read and replaced only through
/// that folder's descriptor, with O_NOFOLLOW, and only when it is a regular file.
public final class BookmarkFile {
    /// The path as given, for messages.
    public let path: String
    let folder: OwnedDescriptor
    let name: String

    /// Bookmarks are a few hundred bytes.
    static let sizeLimit = 64 * 1024

    /// - Parameter trust: which links on the path may be followed: none an
    ///   app (any app, now or once) or another user could have planted.
    public init(path: String, trust: LinkTrust) throws(GrantError) {
        self.path = path
        let fail = { (problem: String) in GrantError.bookmarkFile(path: path, problem: problem) }
        guard path.hasPrefix("/") else { throw fail("give an absolute path") }
        guard let slash = path.lastIndex(of: "/") else { throw fail("give an absolute path") }
        name = String(path[path.index(after: slash)...])
        guard !name.isEmpty, name != ".", name != ".." else { throw fail("name a file, not a folder") }
        let folderPath = slash == path.startIndex ? "/" : String(path[..<slash])
        folder = try SafeWalk.openFolder(FilePath(folderPath), trust: trust, describe: fail)
    }

    /// The file's bytes, or nil when there is no file.
    public func read() throws(GrantError) -> [UInt8]? {
        guard let kind = try kind() else { return nil }
        guard kind == .regular else { throw problem("is \(kind.description), not a bookmark file") }
        // O_NONBLOCK: a FIFO swapped in after the check cannot block the open.
        let fd = openat(folder.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else { throw problem("could not be opened: \(Errno(rawValue: errno))") }
        let file = OwnedDescriptor(taking: fd)
        guard let st = try? file.status(), st.st_mode & S_IFMT == S_IFREG else {
            throw problem("was replaced by something that is not a regular file while being read")
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16384)
        while true {
            let count: Int
            do { count = try syscallRetrying { Glibc.read(file.rawValue, &chunk, chunk.count) } } catch {
                throw problem("could not be read: \(error)")
            }
            if count == 0 { return bytes }
            bytes += chunk[0..<count]
            guard bytes.count <= Self.sizeLimit else { throw problem("is larger than \(Self.sizeLimit / 1024) KiB: not a bookmark") }
        }
    }

    /// Replaces the file atomically: the new bytes are written and synced
    /// before they take the name, and the folder is synced after. Only a
    /// regular file (or nothing) is ever replaced; a crash leaves the old or the new.
    public func replace(with bytes: [UInt8]) throws(GrantError) {
        if let kind = try kind(), kind != .regular {
            throw problem("is \(kind.description): refusing to replace it with a bookmark")
        }
        // An unnamed file (O_TMPFILE) linked into place: a process killed
        // half way leaves nothing behind. The name is replaced, never what it
        // named, so a device swapped in at the last moment is not written.
        // The folder is synced too (through a readable descriptor: `folder` is O_PATH).
        do { try AtomicFile.replace(name, in: folder, with: bytes, mode: 0o600) } catch {
            throw problem("could not be written: \(error)")
        }
    }

    private func kind() throws(GrantError) -> FileKind? {
        var st = stat()
        guard fstatat(folder.rawValue, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno == ENOENT { return nil }
            throw problem("could not be examined: \(Errno(rawValue: errno))")
        }
        return FileKind(st.st_mode)
    }

    private func problem(_ text: String) -> GrantError { .bookmarkFile(path: path, problem: text) }
}

/// What sits at a name, for messages.
enum FileKind: Equatable {
    case regular, directory, symlink, fifo, socket, characterDevice, blockDevice, other

    init(_ mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFLNK: self = .symlink
        case S_IFIFO: self = .fifo
        case S_IFSOCK: self = .socket
        case S_IFCHR: self = .characterDevice
        case S_IFBLK: self = .blockDevice
        default: self = .other
        }
    }

    var description: String {
        switch self {
        case .regular: "a regular file"
        case .directory: "a folder"
        case .symlink: "a symbolic link"
        case .fifo: "a FIFO"
        case .socket: "a socket"
        case .characterDevice: "a character device"
        case .blockDevice: "a block device"
        case .other: "not a regular file"
        }
    }
}

@preconcurrency import Glibc
import CSyscalls
import Sandbox
import SystemPackage

/// `$XDG_STATE_HOME/sandboxed-run` (or `~/.local/state/sandboxed-run`): the
/// ledger and the keys. No sandbox rule ever covers it, and the broker
/// refuses grants that would.
///
/// Trusted only as OpenSSH trusts `~/.ssh`: the folder must be a real folder
/// (never a link) owned by the effective user and writable by nobody else,
/// and every folder above it owned by root or that user and writable by
/// nobody else unless sticky (like /tmp). The path is walked one component at
/// a time, so a link in it is followed only from a folder that passed those
/// checks. The folder is then used through one open descriptor: whatever
/// happens to the path afterwards, keys and ledger are read from the folder
/// that was checked.
public struct StateDirectory: Sendable {
    /// The path as given.
    public let path: String
    /// The checked folder, opened with O_NOFOLLOW | O_DIRECTORY.
    let descriptor: OwnedDescriptor

    public static func defaultPath(environment: [String: String]) throws(GrantError) -> String {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return state + "/sandboxed-run"
        }
        guard let home = environment["HOME"], home.hasPrefix("/") else {
            throw .stateDirectory(step: "finding it (set XDG_STATE_HOME or HOME to an absolute path)", errno: .invalidArgument)
        }
        return home + "/.local/state/sandboxed-run"
    }

    /// Opens the folder, creating it (and missing folders above it) 0700 if
    /// needed, and refuses one that another user made or can write. It never
    /// repairs: a wrong owner or mode is an error that says what to run.
    public init(path: String) throws(GrantError) {
        guard path.hasPrefix("/") else {
            throw .stateDirectory(step: "using \(path) (the state folder must be an absolute path)", errno: .invalidArgument)
        }
        var components = Self.components(path)
        guard let name = components.popLast(), name != ".", name != ".." else {
            throw .stateDirectory(step: "using \(path) (it must name a folder)", errno: .invalidArgument)
        }
        let parent = try Self.openTrustedParent(components, of: path)
        let fd: OwnedDescriptor
        do {
            fd = try Self.openFolder(name, in: parent.fd, create: true)
        } catch .tooManySymbolicLinkLevels, .notDirectory {
            throw Self.notARealFolder(name, in: parent.fd, path: path)
        } catch {
            throw .stateDirectory(step: "opening \(path)", errno: error)
        }
        let st: stat
        do { st = try fd.status() } catch { throw .stateDirectory(step: "reading \(path)", errno: error) }
        if st.st_uid != geteuid() {
            throw .untrustedState(
                path: path, problem: "is owned by uid \(st.st_uid), not by you (uid \(geteuid())): its owner could have planted keys or grants",
                fix: "Move it aside so that sandboxed-run makes a new one (every bookmark made with it becomes invalid); `chown -R \(geteuid()) \(path)` only if you made it yourself.")
        }
        if st.st_mode & 0o022 != 0 {
            throw .untrustedState(
                path: path, problem: "is writable by group or others (mode \(Self.octal(st.st_mode))): they could plant keys or grants",
                fix: "Run `chmod 700 \(path)` if nobody else could have changed it; otherwise move it aside.")
        }
        self.path = path
        descriptor = fd
    }

    /// Where the kernel says the folder is now, free of links: SQLite gets
    /// this (with SQLITE_OPEN_NOFOLLOW, which refuses a link anywhere in a
    /// path), and the ledger checks that it leads to `descriptor`. Asked only
    /// when the ledger is opened: a launch that needs no SQLite skips it.
    func canonicalPath() throws(GrantError) -> String {
        // Bytes, not FilePath: its generic parsing costs ~150 µs at first use, on every launch with a grant.
        guard let bytes = FilePath.pathBytes(ofDescriptor: descriptor.rawValue), let canonical = String(validating: bytes, as: UTF8.self) else {
            throw .stateDirectory(step: "finding where \(path) is (is /proc mounted? SQLite needs a UTF-8 path)", errno: .noSuchFileOrDirectory)
        }
        return canonical
    }

    /// `flock(2)` on the folder: exclusive to make or rotate keys and to make
    /// a new state, shared to read the state whole. Each lock is taken on a
    /// descriptor of its own (flock locks belong to an open file), so it
    /// also excludes brokers in this process that share this value.
    func withLock<T>(exclusive: Bool, _ body: () throws(GrantError) -> T) throws(GrantError) -> T {
        let lock: OwnedDescriptor
        do {
            lock = try descriptor.reopenedFolder()
            _ = try syscallRetrying { flock(lock.rawValue, exclusive ? LOCK_EX : LOCK_SH) }
        } catch {
            throw .stateDirectory(step: "locking \(path)", errno: error)
        }
        defer { _ = flock(lock.rawValue, LOCK_UN) }
        return try body()
    }

    /// A folder of the state's own, `names` below it (each made 0700 when
    /// missing and `create`), opened for reading and checked as every state
    /// file is: a real folder, the user's, private to them. Nil when one is
    /// missing and not `create`. What lives there is the caller's (staged
    /// grants keep bytes a sandboxed command chose below such a folder).
    public func privateFolder(_ names: [String], create: Bool) throws(GrantError) -> OwnedDescriptor? {
        var folder = descriptor
        var shown = path
        for name in names {
            shown += "/" + name
            guard !name.isEmpty, name != ".", name != "..", !name.contains("/") else {
                throw .stateDirectory(step: "using \(shown) (not a plain name)", errno: .invalidArgument)
            }
            do {
                folder = try Self.openFolder(name, in: folder, create: create)
            } catch .noSuchFileOrDirectory where !create {
                return nil
            } catch .tooManySymbolicLinkLevels, .notDirectory {
                throw Self.notARealFolder(name, in: folder, path: shown)
            } catch {
                throw .stateDirectory(step: "opening \(shown)", errno: error)
            }
            let status: stat
            do { status = try folder.status() } catch { throw .stateDirectory(step: "reading \(shown)", errno: error) }
            try Self.checkPrivate(status, path: shown, kind: S_IFDIR)
        }
        return folder
    }

    // MARK: Walking to the folder

    /// Opens the folder above the state folder, component by component from
    /// "/", each opened with O_NOFOLLOW and checked before the next is
    /// looked up in it. A link is read and its target walked the same way,
    /// and in a sticky folder (where anyone may add names) it must be root's
    /// or the user's own. Missing folders are made 0700.
    private static func openTrustedParent(_ components: [String], of path: String) throws(GrantError) -> (fd: OwnedDescriptor, path: String) {
        func open(_ name: String, in folder: OwnedDescriptor?) throws(Errno) -> OwnedDescriptor {
            OwnedDescriptor(taking: try syscallRetrying { csb_open_path(folder?.rawValue ?? AT_FDCWD, name, 0) })
        }
        let root: OwnedDescriptor
        let rootStatus: stat
        do {
            root = try open("/", in: nil)
            rootStatus = try root.status()
        } catch {
            throw .stateDirectory(step: "opening /", errno: error)
        }
        try checkAbove(rootStatus, path: "/", statePath: path)
        var stack: [(fd: OwnedDescriptor, path: String, status: stat)] = [(root, "/", rootStatus)]
        var pending = Array(components.reversed())
        var links = 0
        while let name = pending.popLast() {
            if name.isEmpty || name == "." { continue }
            if name == ".." {
                if stack.count > 1 { stack.removeLast() }
                continue
            }
            let here = stack[stack.count - 1]
            let shown = here.path == "/" ? "/" + name : here.path + "/" + name
            func openOrMake() throws(Errno) -> OwnedDescriptor {
                do {
                    return try open(name, in: here.fd)
                } catch .noSuchFileOrDirectory {
                    if mkdirat(here.fd.rawValue, name, 0o700) != 0, errno != EEXIST { throw Errno(rawValue: errno) }
                    return try open(name, in: here.fd)
                }
            }
            let fd: OwnedDescriptor
            do { fd = try openOrMake() } catch { throw .stateDirectory(step: "opening \(shown)", errno: error) }
            let st: stat
            do { st = try fd.status() } catch { throw .stateDirectory(step: "reading \(shown)", errno: error) }
            if st.st_mode & S_IFMT == S_IFLNK {
                links += 1
                guard links <= 40 else { throw .stateDirectory(step: "following links in \(path)", errno: .tooManySymbolicLinkLevels) }
                if here.status.st_mode & S_ISVTX != 0, st.st_uid != 0, st.st_uid != geteuid() {
                    throw .untrustedState(
                        path: shown, problem: "is a link in the shared folder \(here.path), made by uid \(st.st_uid), who can point it anywhere",
                        fix: "Set XDG_STATE_HOME (or HOME) to a path that only you and root control.")
                }
                guard let target = readLink(fd), !target.isEmpty else {
                    throw .stateDirectory(step: "reading the link \(shown)", errno: Errno(rawValue: errno))
                }
                if target.hasPrefix("/") { stack.removeSubrange(1...) }
                pending += Self.components(target).reversed()
                continue
            }
            guard st.st_mode & S_IFMT == S_IFDIR else {
                throw .stateDirectory(step: "using \(shown) (it is not a folder)", errno: .notDirectory)
            }
            try checkAbove(st, path: shown, statePath: path)
            stack.append((fd, shown, st))
        }
        return (stack[stack.count - 1].fd, stack[stack.count - 1].path)
    }

    /// The names in `path`, split at the byte "/" as the kernel splits it.
    /// Not by Character: "/" followed by a combining mark is one Character,
    /// so "link/\u{301}x" would stay one name, and opening it would follow
    /// `link` unchecked (and cost ~8 µs at every launch with a grant).
    static func components(_ path: String) -> [String] {
        path.utf8.split(separator: UInt8(ascii: "/")).map { String(Substring($0)) }
    }

    /// A folder above the state must be root's or the user's, and writable
    /// by nobody else unless sticky: otherwise its owner or writers could
    /// rename the state folder away and put their own in its place.
    private static func checkAbove(_ st: stat, path: String, statePath: String) throws(GrantError) {
        if st.st_uid != 0, st.st_uid != geteuid() {
            throw .untrustedState(
                path: path, problem: "(above the state folder \(statePath)) is owned by uid \(st.st_uid), who could replace the state with their own",
                fix: "Set XDG_STATE_HOME (or HOME) to a folder that you or root own.")
        }
        if st.st_mode & 0o022 != 0, st.st_mode & S_ISVTX == 0 {
            throw .untrustedState(
                path: path, problem: "(above the state folder \(statePath)) is writable by group or others and not sticky (mode \(octal(st.st_mode))), so they could replace the state with their own",
                fix: "Run `chmod go-w \(path)`, or set XDG_STATE_HOME to a folder only you can write.")
        }
    }

    /// Opens `name` in `folder` as a real folder (O_NOFOLLOW | O_DIRECTORY),
    /// making it 0700 first if `create` and it is missing.
    static func openFolder(_ name: String, in folder: OwnedDescriptor, create: Bool) throws(Errno) -> OwnedDescriptor {
        do {
            return try .openFolder(Array(name.utf8), relativeTo: folder, follow: false, use: .read)
        } catch .noSuchFileOrDirectory where create {
            if mkdirat(folder.rawValue, name, 0o700) != 0, errno != EEXIST { throw Errno(rawValue: errno) }
            return try .openFolder(Array(name.utf8), relativeTo: folder, follow: false, use: .read)
        }
    }

    /// Why `name` could not be opened as a folder: a link, or something else.
    static func notARealFolder(_ name: String, in folder: OwnedDescriptor, path: String) -> GrantError {
        var st = stat()
        if fstatat(folder.rawValue, name, &st, AT_SYMLINK_NOFOLLOW) == 0, st.st_mode & S_IFMT == S_IFLNK {
            return .untrustedState(
                path: path, problem: "is a symbolic link: sandboxed-run never follows links in its state, since whoever can change the link chooses the keys",
                fix: "Replace the link with the folder it points to, or point XDG_STATE_HOME at the real place.")
        }
        return .untrustedState(path: path, problem: "is not a folder", fix: "Move it aside.")
    }

    static func readLink(_ fd: OwnedDescriptor) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlinkat(fd.rawValue, "", &buffer, Int(PATH_MAX))
        guard length >= 0 else { return nil }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func octal(_ mode: mode_t) -> String {
        "0" + String(mode & 0o7777, radix: 8)
    }

    // MARK: Files in the state

    /// What a private file in the state must be.
    struct PrivateFile {
        let descriptor: OwnedDescriptor
        let status: stat
    }

    /// Opens `name` in `folder` (shown as `path`) for reading and checks it:
    /// a regular file (no link, FIFO or device: O_NOFOLLOW | O_NONBLOCK),
    /// owned by the effective user, with no access for group or others.
    /// Nil when it does not exist.
    static func openPrivateFile(_ name: String, in folder: OwnedDescriptor, path: String) throws(GrantError) -> PrivateFile? {
        guard let st = try statPrivateFile(name, in: folder, path: path) else { return nil }
        let fd: OwnedDescriptor
        let opened: stat
        do {
            fd = OwnedDescriptor(taking: try syscallRetrying {
                openat(folder.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
            })
            opened = try fd.status()
        } catch .noSuchFileOrDirectory {
            return nil
        } catch {
            throw .stateDirectory(step: "opening \(path)", errno: error)
        }
        // What was opened is what was checked (the inode is pinned now).
        guard opened.st_dev == st.st_dev, opened.st_ino == st.st_ino else {
            throw .stateDirectory(step: "opening \(path) (it was replaced while being opened)", errno: .resourceTemporarilyUnavailable)
        }
        try checkPrivate(opened, path: path, kind: S_IFREG)
        return PrivateFile(descriptor: fd, status: opened)
    }

    /// Checks `name` in `folder` as `openPrivateFile` does, without opening
    /// it: for the ledger, since closing any descriptor of a file drops the
    /// POSIX locks SQLite holds on it in this process (and another process
    /// could then delete -wal and -shm from under it). Nil when missing.
    static func statPrivateFile(_ name: String, in folder: OwnedDescriptor, path: String) throws(GrantError) -> stat? {
        var st = stat()
        if fstatat(folder.rawValue, name, &st, AT_SYMLINK_NOFOLLOW) != 0 {
            if errno == ENOENT { return nil }
            throw .stateDirectory(step: "reading \(path)", errno: Errno(rawValue: errno))
        }
        try checkPrivate(st, path: path, kind: S_IFREG)
        return st
    }

    /// Refuses a file or folder in the state that is a link or of another
    /// type, another user's, or reachable by group or others.
    static func checkPrivate(_ st: stat, path: String, kind: mode_t) throws(GrantError) {
        let type = st.st_mode & S_IFMT
        if type == S_IFLNK {
            throw .untrustedState(
                path: path, problem: "is a symbolic link: sandboxed-run never follows links in its state",
                fix: "Replace the link with the \(kind == S_IFDIR ? "folder" : "file") it points to, if you made it; otherwise remove it.")
        }
        guard type == kind else {
            let what = switch type {
            case S_IFDIR: "a folder"
            case S_IFIFO: "a FIFO"
            case S_IFCHR, S_IFBLK: "a device"
            case S_IFSOCK: "a socket"
            default: "a regular file"
            }
            throw .untrustedState(path: path, problem: "is \(what), not a \(kind == S_IFDIR ? "folder" : "regular file")", fix: "Move it aside.")
        }
        if st.st_uid != geteuid() {
            throw .untrustedState(
                path: path, problem: "is owned by uid \(st.st_uid), not by you (uid \(geteuid()))",
                fix: "Move it aside; `chown \(geteuid()) \(path)` only if you made it yourself.")
        }
        if st.st_mode & 0o077 != 0 {
            let mode = kind == S_IFDIR ? "700" : "600"
            throw .untrustedState(
                path: path, problem: "is accessible to group or others (mode \(octal(st.st_mode))): they may have read or changed it",
                fix: "Run `chmod \(mode) \(path)`; if others could have read a key, also run `sandboxed-run grants rotate-key` and save your bookmarks again.")
        }
    }

    /// Reads a whole small file from the start.
    static func readAll(_ fd: OwnedDescriptor, limit: Int) throws(Errno) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        var offset: off_t = 0
        while true {
            let count = try syscallRetrying { pread(fd.rawValue, &chunk, chunk.count, offset) }
            if count == 0 { return bytes }
            bytes += chunk[0..<count]
            offset += off_t(count)
            if bytes.count > limit { throw .fileTooLarge }
        }
    }
}

/// Writes whole files or nothing, relative to a folder descriptor: a new file
/// beside the target, fsync, linked or renamed over it. A crash leaves the
/// old or the new.
public enum AtomicFile {
    /// Replaces `name` in `folder` whole, never following a link there.
    /// The new file is made unnamed (O_TMPFILE) where the filesystem allows,
    /// so a process killed while writing leaves nothing behind. With
    /// `durable: false`, for a file whose loss costs nothing (a cache that
    /// authenticates itself), nothing is synced: after a crash the name may
    /// hold the old file, the new one, or an empty or partial one.
    static func replace(_ name: String, in folder: OwnedDescriptor, with bytes: [UInt8], mode: mode_t, durable: Bool = true) throws(Errno) {
        let temporary = name + ".tmp-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        if try !replaceUnnamed(name, temporary: temporary, in: folder, with: bytes, mode: mode, sync: durable) {
            let file = OwnedDescriptor(taking: try syscallRetrying {
                openat(folder.rawValue, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            })
            do { try fill(file, with: bytes, mode: mode, sync: durable) } catch {
                unlinkat(folder.rawValue, temporary, 0)
                throw error
            }
            try renameOrRemove(temporary, to: name, in: folder)
        }
        if durable { try syncFolder(folder) }
    }

    /// fsync of the folder, so that the new name is on disk too. `folder`
    /// may be an O_PATH descriptor (fsync on one gives EBADF): the folder is
    /// opened again, for reading, through it.
    static func syncFolder(_ folder: OwnedDescriptor) throws(Errno) {
        let readable = try folder.reopenedFolder()
        _ = try syscallRetrying { fsync(readable.rawValue) }
    }

    /// The unnamed way: O_TMPFILE, filled, then linked in (at the target's
    /// name if free, else at `temporary`, renamed over it). False when the
    /// filesystem (or a missing /proc) does not allow it.
    private static func replaceUnnamed(_ name: String, temporary: String, in folder: OwnedDescriptor, with bytes: [UInt8], mode: mode_t, sync: Bool) throws(Errno) -> Bool {
        // O_TMPFILE (hidden from Swift by Glibc): __O_TMPFILE | O_DIRECTORY.
        let unnamed = openat(folder.rawValue, ".", 0o20000000 | O_DIRECTORY | O_WRONLY | O_CLOEXEC, mode)
        guard unnamed >= 0 else {
            let code = errno
            if [EOPNOTSUPP, EISDIR, EINVAL].contains(code) { return false }
            throw Errno(rawValue: code)
        }
        let file = OwnedDescriptor(taking: unnamed)
        try fill(file, with: bytes, mode: mode, sync: sync)
        let source = "/proc/self/fd/\(file.rawValue)"
        if linkat(AT_FDCWD, source, folder.rawValue, name, AT_SYMLINK_FOLLOW) == 0 { return true }
        guard errno == EEXIST else {
            let code = errno
            if [ENOENT, EPERM, EXDEV].contains(code) { return false }
            throw Errno(rawValue: code)
        }
        _ = try syscallRetrying { linkat(AT_FDCWD, source, folder.rawValue, temporary, AT_SYMLINK_FOLLOW) }
        try renameOrRemove(temporary, to: name, in: folder)
        return true
    }

    private static func fill(_ file: OwnedDescriptor, with bytes: [UInt8], mode: mode_t, sync: Bool) throws(Errno) {
        // Made with `mode`; only a umask that took bits away needs a chmod.
        // Inside a supervised sandbox a chmod of an unnamed file is refused
        // (the supervisor cannot place it), so none is made when none is needed.
        if try file.status().st_mode & 0o7777 != mode {
            _ = try syscallRetrying { fchmod(file.rawValue, mode) }
        }
        var offset = 0
        while offset < bytes.count {
            offset += try syscallRetrying {
                bytes.withUnsafeBytes { Glibc.write(file.rawValue, $0.baseAddress! + offset, $0.count - offset) }
            }
        }
        if sync { _ = try syscallRetrying { fsync(file.rawValue) } }
    }

    private static func renameOrRemove(_ temporary: String, to name: String, in folder: OwnedDescriptor) throws(Errno) {
        do {
            _ = try syscallRetrying { renameat(folder.rawValue, temporary, folder.rawValue, name) }
        } catch {
            unlinkat(folder.rawValue, temporary, 0)
            throw error
        }
    }

    /// Reads a regular file (a FIFO or device is refused, never waited on).
    public static func read(_ path: String, limit: Int = 1 << 20) throws(Errno) -> [UInt8] {
        let file = OwnedDescriptor(taking: try syscallRetrying { open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) })
        guard try file.status().st_mode & S_IFMT == S_IFREG else { throw .invalidArgument }
        return try StateDirectory.readAll(file, limit: limit)
    }
}

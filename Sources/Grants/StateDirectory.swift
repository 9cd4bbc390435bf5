@preconcurrency import Glibc
import CSandbox
import Sandbox
import SystemPackage

/// `$XDG_STATE_HOME/sandboxed-run` (or `~/.local/state/sandboxed-run`),
/// mode 0700: the ledger and the keys. No sandbox rule ever covers it, and
/// the broker refuses grants that would.
public struct StateDirectory: Sendable {
    public let path: String

    public static func defaultPath(environment: [String: String]) throws(GrantError) -> String {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return state + "/sandboxed-run"
        }
        guard let home = environment["HOME"], home.hasPrefix("/") else {
            throw .stateDirectory(step: "finding it (set XDG_STATE_HOME or HOME to an absolute path)", errno: .invalidArgument)
        }
        return home + "/.local/state/sandboxed-run"
    }

    /// Opens (creating it 0700 if needed) and refuses one that others can read.
    public init(path: String) throws(GrantError) {
        self.path = path
        var partial = ""
        for component in path.split(separator: "/") {
            partial += "/" + component
            if mkdir(partial, 0o700) != 0, errno != EEXIST {
                throw .stateDirectory(step: "creating \(partial)", errno: Errno(rawValue: errno))
            }
        }
        var st = stat()
        guard lstat(path, &st) == 0 else { throw .stateDirectory(step: "reading \(path)", errno: Errno(rawValue: errno)) }
        guard (st.st_mode & S_IFMT) == S_IFDIR else { throw .stateDirectory(step: "\(path) is not a directory", errno: .notDirectory) }
        if st.st_mode & 0o077 != 0 { chmod(path, 0o700) }
        for sub in ["keys"] where mkdir(path + "/" + sub, 0o700) != 0 && errno != EEXIST {
            throw .stateDirectory(step: "creating \(path)/\(sub)", errno: Errno(rawValue: errno))
        }
    }
}

/// Writes whole files or nothing: a temporary file beside the target,
/// fsync, rename over it, fsync the folder. A crash leaves the old or the new.
public enum AtomicFile {
    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600) throws(Errno) {
        let folder = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let temporary = path + ".tmp-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Errno(rawValue: errno) }
        var committed = false
        defer { if !committed { unlink(temporary) } }
        do {
            let file = OwnedDescriptor(taking: fd)
            _ = try syscallRetrying { fchmod(file.rawValue, mode) }
            var offset = 0
            while offset < bytes.count {
                let remaining = Array(bytes[offset...])
                let written = try syscallRetrying { Glibc.write(file.rawValue, remaining, remaining.count) }
                offset += written
            }
            _ = try syscallRetrying { fsync(file.rawValue) }
        }
        _ = try syscallRetrying { rename(temporary, path) }
        committed = true
        let directory = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)
            close(directory)
        }
    }

    public static func read(_ path: String, limit: Int = 1 << 20) throws(Errno) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Errno(rawValue: errno) }
        let file = OwnedDescriptor(taking: fd)
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16384)
        while true {
            let count = try syscallRetrying { Glibc.read(file.rawValue, &chunk, chunk.count) }
            if count == 0 { return bytes }
            bytes += chunk[0..<count]
            if bytes.count > limit { throw .fileTooLarge }
        }
    }
}

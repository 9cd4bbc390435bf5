@preconcurrency import Glibc
import CSyscalls
import SystemPackage

/// Finds what a path the confined command passed to a syscall names, as the
/// kernel found it for the command: an absolute path (and every absolute
/// link on the way) from the command's root, in the mount namespace the
/// keeper made, where /proc and /dev/shm are the sandbox's own; a relative
/// one from the command's working directory or the folder descriptor it
/// passed; /proc/self and /proc/thread-self as the caller's own entries, by
/// the ids its pid namespace gives it. The supervisor acts on what this
/// finds and the denial observer predicts from it: one resolver, so that
/// both judge the file the command's call reached, never one of the
/// launcher's view. It only opens (O_PATH, no magic links followed): the
/// caller decides with whose powers (the command's, so that nothing is
/// found that the command could not find itself).
package final class CommandPaths {
    /// The command's "/", or nil before the keeper made its namespace (or
    /// without one): then the command's view is the launcher's.
    private(set) var root: OwnedDescriptor?
    /// Devices of the launcher's own mounts where the command has its own
    /// (/dev/shm, /proc): a walk that still lands on one names nothing the
    /// command can see, so it does not exist.
    private var shadowedDevices: Set<UInt64> = []

    package init() {}

    /// Called once the keeper has made the command's mounts: from then on,
    /// paths are resolved in its namespace.
    package func enterNamespace(of keeper: pid_t, privateMounts: [String]) {
        guard let root = try? Self.open("/proc/\(keeper)/root", follow: true) else { return }
        self.root = root
        shadowedDevices = Set(privateMounts.compactMap { mount in
            var status = stat()
            return stat(mount, &status) == 0 ? UInt64(status.st_dev) : nil
        })
    }

    /// Where a syscall's path argument starts.
    package enum Start {
        /// A descriptor of the command's, already open (an fd argument, or
        /// a /proc/self/fd/N path).
        case descriptor(OwnedDescriptor)
        /// A NUL-terminated path, from `base` (nil: it is absolute).
        case path(base: OwnedDescriptor?, [CChar], follow: Bool)
    }

    /// `path`: NUL-terminated, as copied from the caller, nil for a call
    /// that takes none; `directory`: its dirfd argument, nil for a call that
    /// has none (AT_FDCWD); `emptyPath`: AT_EMPTY_PATH was given. Opens the
    /// caller's /proc entries: they hold nothing the caller does not have.
    package func start(path: [CChar]?, directory: Int32?, emptyPath: Bool, follow: Bool, caller: pid_t) throws(Errno) -> Start {
        if let path, path.count > 1 {
            if let child = try Self.childDescriptor(named: path, caller: caller) {
                return .descriptor(try Self.openInChild(pid: child.process, fd: child.fd, byPath: true))
            }
            if path[0] == Self.slash { return .path(base: nil, path, follow: follow) }
            if let directory, directory != AT_FDCWD {
                return .path(base: try Self.openInChild(pid: caller, fd: directory), path, follow: follow)
            }
            return .path(base: try Self.open("/proc/\(caller)/cwd", follow: true), path, follow: follow)
        }
        if path == nil || emptyPath, let directory { return .descriptor(try Self.openInChild(pid: caller, fd: directory)) }
        throw .noSuchFileOrDirectory
    }

    /// What a path led to: the file, what fstat said of it, and the folder
    /// its last name was found in when that is known (the name was not a
    /// link that was followed, ".", ".." or empty): the beneath check then
    /// starts there instead of asking /proc for the file's name.
    package struct Resolved {
        package let target: OwnedDescriptor
        package let status: stat
        package let folder: OwnedDescriptor?

        package init(target: OwnedDescriptor, status: stat, folder: OwnedDescriptor?) {
            self.target = target
            self.status = status
            self.folder = folder
        }
    }

    /// Opens what `start` names as one openat2 by the command would.
    /// `caller` names /proc/self.
    package func resolve(_ start: Start, caller: pid_t) throws(Errno) -> Resolved {
        let resolved: Resolved
        switch start {
        case .descriptor(let descriptor):
            resolved = Resolved(target: descriptor, status: try descriptor.status(), folder: nil)
        case .path(let base?, let path, let follow) where root != nil:
            // A walk that stays beneath `base` finds what the command's did
            // (the mounts beneath it are the command's); one that leaves it
            // (an absolute link, ".." above it) is taken again from the
            // command's root: openat2 from `base` would go on from ours.
            do {
                resolved = try Self.resolve(path, from: .beneath(base), follow: follow)
            } catch .improperLink {
                let (from, spelled) = try place(path, base: base, caller: caller)
                resolved = try Self.resolve(spelled, from: from, follow: follow)
            }
        case .path(let base, let path, let follow):
            let (from, spelled) = try place(path, base: base, caller: caller)
            resolved = try Self.resolve(spelled, from: from, follow: follow)
        }
        if shadowedDevices.contains(UInt64(resolved.status.st_dev)) { throw .noSuchFileOrDirectory }
        return resolved
    }

    /// The folder the last name of `start`'s path is looked up in (links on
    /// the way followed, trailing slashes dropped), and that name: where a
    /// call that creates, removes, renames or links a name acts. Nil for a
    /// descriptor, and for "/" or a last name of "." or "..".
    package func parent(_ start: Start, caller: pid_t) throws(Errno) -> (folder: OwnedDescriptor, name: [CChar])? {
        guard case .path(let base, let path, _) = start else { return nil }
        var bytes = Array(path.prefix { $0 != 0 })
        while bytes.count > 1, bytes.last == Self.slash { bytes.removeLast() }
        let cut = bytes.lastIndex(of: Self.slash)
        let name = Array(bytes[(cut.map { $0 + 1 } ?? 0)...])
        guard !name.isEmpty, name != [Self.dot], name != [Self.dot, Self.dot] else { return nil }
        let folder: OwnedDescriptor
        if let cut {
            let folderPath = (cut == 0 ? [Self.slash] : Array(bytes[..<cut])) + [0]
            folder = try resolve(.path(base: base, folderPath, follow: true), caller: caller).target
        } else if let base {
            folder = base
        } else {
            return nil
        }
        return (folder, name + [0])
    }

    /// The folder that holds `file` (not a folder), found again from the
    /// command's root (see `Ancestry.folder(holding:)`).
    package func folder(holding file: OwnedDescriptor, identity: InodeIdentity, unlinked allowed: Bool) throws(Errno) -> OwnedDescriptor {
        try Ancestry.folder(holding: file, identity: identity, root: root, unlinked: allowed)
    }

    /// The path as the command sees it, for messages: absolute as given, a
    /// relative one after the path of the folder it starts from.
    package func shown(_ start: Start) -> [UInt8] {
        switch start {
        case .descriptor(let descriptor):
            return FilePath.pathBytes(ofDescriptor: descriptor.rawValue) ?? []
        case .path(let base, let path, _):
            let bytes = path.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
            guard let base, let folder = FilePath.pathBytes(ofDescriptor: base.rawValue) else { return bytes }
            return folder + [UInt8(ascii: "/")] + bytes
        }
    }

    // MARK: Resolution

    private static let slash = CChar(UInt8(ascii: "/"))
    private static let dot = CChar(UInt8(ascii: "."))

    /// Where to resolve `path` from, and how it is spelled from there:
    /// relative paths in the command's namespace become paths from its root
    /// (openat2 from `base` would follow an absolute link from the
    /// launcher's "/", the kernel from the command's); /proc/self becomes
    /// the caller's own entry. The first try of a relative path is beneath
    /// its folder (`resolve(_:caller:)`): the cheaper walk, and the same.
    private func place(_ path: [CChar], base: OwnedDescriptor?, caller: pid_t) throws(Errno) -> (from: From, path: [CChar]) {
        if let base {
            guard let root, let absolute = fromRoot(path, base: base, root: root) else { return (.folder(base), path) }
            return (.root(root), try Self.ownProc(absolute, caller: caller))
        }
        let spelled = try Self.ownProc(path, caller: caller)
        return (root.map { .root($0) } ?? .folder(nil), spelled)
    }

    /// A relative `path` from `base` as a path from the command's root: the
    /// kernel's name for `base` (from the namespace's root, since ours cannot
    /// reach it), proven to lead to `base` in the command's view. Nil when it
    /// does not (a folder deleted or renamed meanwhile), or would be too long.
    private func fromRoot(_ path: [CChar], base: OwnedDescriptor, root: OwnedDescriptor) -> [CChar]? {
        guard let folder = FilePath.pathBytes(ofDescriptor: base.rawValue), folder.count + path.count < Int(PATH_MAX) else { return nil }
        let named = folder.map { CChar(bitPattern: $0) }
        guard let reopened = try? Self.openat2(root.rawValue, named + [0], follow: false, inRoot: true),
              let here = try? reopened.status(), let there = try? base.status(), here.inodeIdentity == there.inodeIdentity else {
            return nil
        }
        return named + [Self.slash] + path
    }

    /// `/proc/self/...` and `/proc/thread-self/...` (with any "." or empty
    /// names around them) as the caller's own entries, by the ids of its
    /// own pid namespace: the launcher's openat2 would find its own entry,
    /// or none in a /proc of another pid namespace.
    package static func ownProc(_ path: [CChar], caller: pid_t) throws(Errno) -> [CChar] {
        guard path.first == slash, caller > 0 else { return path }
        // The first two names, skipping "." and empty ones.
        var names: [ArraySlice<CChar>] = []
        var index = path.startIndex
        let end = path.firstIndex(of: 0) ?? path.endIndex
        while names.count < 2, index < end {
            let next = path[index..<end].firstIndex(of: slash) ?? end
            let name = path[index..<next]
            if !name.isEmpty, name != [dot] { names.append(name) }
            index = next == end ? end : next + 1
        }
        guard names.count == 2, Array(names[0]) == Self.procName else { return path }
        let thread: Bool
        switch Array(names[1]) {
        case selfName: thread = false
        case threadSelfName: thread = true
        default: return path
        }
        let ids = try identities(of: caller)
        let own = "/proc/\(ids.innermostProcess)" + (thread ? "/task/\(ids.innermostThread)" : "")
        // What follows the second name, its slash included.
        let rest = names[1].endIndex < end ? Array(path[names[1].endIndex...]) : [0]
        return Array(own.utf8).map { CChar(bitPattern: $0) } + rest
    }

    private static let procName = Array("proc".utf8).map { CChar(bitPattern: $0) }
    private static let selfName = Array("self".utf8).map { CChar(bitPattern: $0) }
    private static let threadSelfName = Array("thread-self".utf8).map { CChar(bitPattern: $0) }

    private enum From {
        /// With RESOLVE_IN_ROOT: "/" and ".." stop at the command's root.
        case root(OwnedDescriptor)
        /// A folder, or nil: the launcher's working directory (absolute paths without a namespace).
        case folder(OwnedDescriptor?)
        /// With RESOLVE_BENEATH: EXDEV (`improperLink`) when the walk would leave the folder.
        case beneath(OwnedDescriptor)
    }

    private func openFromRoot(_ path: [CChar], follow: Bool) throws(Errno) -> OwnedDescriptor {
        if let root { return try Self.openat2(root.rawValue, path, follow: follow, inRoot: true) }
        return try Self.openat2(AT_FDCWD, path, follow: follow, inRoot: false)
    }

    private static func openat2(_ directory: CInt, _ path: [CChar], follow: Bool, inRoot: Bool) throws(Errno) -> OwnedDescriptor {
        // EAGAIN: a rename or mount elsewhere raced the ".." walk of a
        // contained lookup. Tried again a few times; a command that keeps
        // renaming gets EAGAIN for its own call, never a lookup outside.
        var attempts = 0
        while true {
            do {
                return OwnedDescriptor(taking: try syscallRetrying {
                    inRoot ? csb_openat2_path_in_root(directory, path, follow ? 1 : 0) : csb_openat2_path(directory, path, follow ? 1 : 0)
                })
            } catch .resourceTemporarilyUnavailable where attempts < 8 {
                attempts += 1
            }
        }
    }

    /// One openat2 (no magic links), after its last name is looked up in its
    /// folder apart, so that the folder is known (see `Resolved`).
    private static func resolve(_ path: [CChar], from: From, follow: Bool) throws(Errno) -> Resolved {
        func open(_ path: [CChar], follow: Bool) throws(Errno) -> OwnedDescriptor {
            switch from {
            case .root(let root): try openat2(root.rawValue, path, follow: follow, inRoot: true)
            case .folder(let folder): try openat2(folder?.rawValue ?? AT_FDCWD, path, follow: follow, inRoot: false)
            case .beneath(let folder):
                OwnedDescriptor(taking: try syscallRetrying { csb_openat2_path_beneath(folder.rawValue, path, follow ? 1 : 0) })
            }
        }
        let end = path.firstIndex(of: 0) ?? path.count
        let cut = path[..<end].lastIndex(of: slash)
        let leaf = path[(cut.map { $0 + 1 } ?? 0)..<end]
        let plain = !leaf.isEmpty && !(leaf.count <= 2 && leaf.allSatisfy { $0 == dot })
        func whole() throws(Errno) -> Resolved {
            let target = try open(path, follow: follow)
            return Resolved(target: target, status: try target.status(), folder: nil)
        }
        guard plain else { return try whole() }
        let folder: OwnedDescriptor
        if let cut {
            folder = try open((cut == 0 ? [slash] : Array(path[..<cut])) + [0], follow: true)
        } else if case .folder(let base?) = from {
            folder = base
        } else if case .beneath(let base) = from {
            folder = base
        } else {
            return try whole()
        }
        let name = Array(leaf) + [0]
        let target = try openat2(folder.rawValue, name, follow: false, inRoot: false)
        let status = try target.status()
        guard follow, status.isSymlink else { return Resolved(target: target, status: status, folder: folder) }
        // A followed link may lead anywhere (an absolute one from the root): found whole.
        return try whole()
    }

    // MARK: The caller's descriptors and ids

    /// `/proc/self/fd/N`, `/proc/thread-self/fd/N`, `/proc/P/fd/N` with P
    /// the caller's process or thread id, and `/dev/fd/N` name the child's
    /// descriptor N: returns the process whose table holds it, and N. Any
    /// other spelling is resolved as a path, where RESOLVE_NO_MAGICLINKS
    /// refuses the magic link (ELOOP).
    package static func childDescriptor(named path: [CChar], caller: pid_t) throws(Errno) -> (process: pid_t, fd: Int32)? {
        // Most paths are neither: answered before any String is made.
        guard path.starts(with: Self.devPrefix) || path.starts(with: Self.procPrefix) else { return nil }
        let text = String(decoding: path.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        let process: pid_t
        let number: Substring
        if parts.count == 4, parts[0] == "", parts[1] == "dev", parts[2] == "fd" {
            process = try threadGroup(of: caller)  // /dev/fd is /proc/self/fd
            number = parts[3]
        } else if parts.count == 5, parts[0] == "", parts[1] == "proc", parts[3] == "fd" {
            switch parts[2] {
            case "self": process = try threadGroup(of: caller)
            case "thread-self": process = caller
            default:
                // P is as the child sees it: in its own pid namespace, if it has one.
                guard let named = canonicalNumber(parts[2]) else { return nil }
                let ids = try identities(of: caller)
                if named == ids.innermostThread {
                    process = caller
                } else if named == ids.innermostProcess {
                    process = ids.process
                } else {
                    return nil
                }
            }
            number = parts[4]
        } else {
            return nil
        }
        guard let fd = canonicalNumber(number) else { return nil }
        return (process: process, fd: fd)
    }

    private static let devPrefix = Array("/dev/".utf8).map { CChar(bitPattern: $0) }
    private static let procPrefix = Array("/proc/".utf8).map { CChar(bitPattern: $0) }

    /// A decimal as /proc reads it: digits only, no leading zero, within an int.
    private static func canonicalNumber(_ text: Substring) -> Int32? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              text == "0" || text.first != "0" else { return nil }
        return Int32(text)
    }

    /// The process a thread belongs to (`Tgid:` in /proc/TID/status).
    private static func threadGroup(of thread: pid_t) throws(Errno) -> pid_t {
        try identities(of: thread).process
    }

    /// A thread's process, and both ids as the thread itself sees them (the
    /// last of `NStgid:` and `NSpid:`, its innermost pid namespace).
    package static func identities(of thread: pid_t) throws(Errno) -> (process: pid_t, innermostProcess: pid_t, innermostThread: pid_t) {
        let fd = try syscallRetrying { Glibc.open("/proc/\(thread)/status", O_RDONLY | O_CLOEXEC) }
        let file = OwnedDescriptor(taking: fd)
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = try syscallRetrying { buffer.withUnsafeMutableBytes { read(file.rawValue, $0.baseAddress, $0.count) } }
        let lines = String(decoding: buffer[0..<count], as: UTF8.self).split(separator: "\n")
        func values(_ key: String) -> [pid_t] {
            guard let line = lines.first(where: { $0.hasPrefix(key) }) else { return [] }
            return line.dropFirst(key.count).split(whereSeparator: { $0 == " " || $0 == "\t" }).compactMap { pid_t($0) }
        }
        guard let tgid = values("Tgid:").first, let nsTgid = values("NStgid:").last, let nsPid = values("NSpid:").last else {
            throw .noSuchProcess
        }
        return (tgid, nsTgid, nsPid)
    }

    /// The file the child's descriptor `fd` holds. A descriptor the child
    /// does not have is EBADF, as the kernel answers for an fd argument;
    /// `byPath` keeps ENOENT, as for a /proc/self/fd/N path.
    package static func openInChild(pid: pid_t, fd: Int32, byPath: Bool = false) throws(Errno) -> OwnedDescriptor {
        guard fd >= 0 else { throw .badFileDescriptor }
        do {
            return try open("/proc/\(pid)/fd/\(fd)", follow: true)
        } catch .noSuchFileOrDirectory where !byPath {
            throw .badFileDescriptor
        }
    }

    package static func open(_ path: String, follow: Bool) throws(Errno) -> OwnedDescriptor {
        OwnedDescriptor(taking: try syscallRetrying { csb_open_path(AT_FDCWD, path, follow ? 1 : 0) })
    }
}

@preconcurrency import Glibc
import SystemPackage
import Egress
@_spi(Fuzzing) import PropertyLists

extension Policy {
    public static let currentVersion = 1
    static let ownPrefix = "org.sandboxed-run."
    /// The key of `executeFiles`, which `--explain` names.
    public static let executeFilesKey = "org.sandboxed-run.files.execute"
    /// The key of `symbolicLinks`, which `--explain` names.
    public static let symbolicLinksKey = "org.sandboxed-run.files.symbolic-links"
    public static let reviewKey = "org.sandboxed-run.files.review"
    /// The key of `allowedHosts`, which `--explain` names.
    public static let allowedHostsKey = "org.sandboxed-run.network.allowed-hosts"
    public static let bookmarksAppScopeKey = "com.apple.security.files.bookmarks.app-scope"

    /// The shipped policies' names, as `--policy` takes them (the tests
    /// require them equal to the files in `Policies/`).
    public static let builtinNames = ["writer", "read-only", "networked", "developer"]

    /// The name of the policy used when none is given.
    public static let defaultName = "writer"

    /// The policy `run` uses when `--policy` is absent.
    public static var defaultPolicy: Policy {
        // The compiled policies are checked by the tests; failing here is a build defect.
        builtin(named: defaultName)!
    }

    /// A policy shipped in `Policies/`, by name (`writer`, `read-only`, `networked`, `developer`).
    /// Compiled into code (`CompiledPolicies.swift`, generated from the same
    /// files; `CompiledPoliciesTests` requires every shipped name there, equal
    /// to what its file decodes to): a launch decodes nothing, and the files
    /// themselves are not in the binary.
    public static func builtin(named name: String) -> Policy? {
        compiled(named: name)
    }

    /// Reads a policy file: a property list, a macOS `.entitlements` file or JSON.
    ///
    /// Only a regular file is read. A FIFO would block the launcher forever
    /// and a device could be endless or act on being opened, so both are
    /// refused: by `stat` before opening, and by `fstat` on what was opened
    /// (non-blocking, so a FIFO swapped in between cannot hang the open).
    /// `trust`: which links may be followed and which folders an app could
    /// write (see `LinkTrust`). The file is found without following a symlink
    /// an app could have planted, opened once, and refused if it lies where an
    /// app could write or has a second name: a policy an app could edit is no policy. The checks and the read use
    /// the same descriptors, so nothing can be swapped in between.
    public init(contentsOfFile path: String, trust: LinkTrust = .everyLink()) throws(SandboxError) {
        func failure(_ problem: String) -> SandboxError {
            .policy(PolicyError(file: path, key: nil, problem: problem))
        }
        let builtins = Policy.builtinNames.joined(separator: ", ")
        func refuse(_ status: stat) -> SandboxError? {
            let kind: String
            switch status.st_mode & S_IFMT {
            case S_IFREG: return nil
            case S_IFDIR: kind = "a directory"
            case S_IFIFO: kind = "a FIFO (named pipe), which could keep the launcher waiting forever"
            case S_IFSOCK: kind = "a socket"
            case S_IFCHR: kind = "a character device"
            case S_IFBLK: kind = "a block device"
            default: kind = "not a file"
            }
            return failure("is \(kind), not a regular file; give the path of a policy file "
                + "(.plist, .entitlements or .json; save piped text to a file first) or one of: \(builtins)")
        }
        var absolute = path
        if !path.hasPrefix("/") {
            guard let cwd = getcwd(nil, 0) else {
                throw failure("a relative path, and the working directory cannot be found (\(Errno(rawValue: errno))); "
                    + "give an absolute path, or one of: \(builtins)")
            }
            absolute = String(cString: cwd) + "/" + path
            free(cwd)
        }
        guard let slash = absolute.lastIndex(of: "/") else { throw failure("give an absolute path, or one of: \(builtins)") }
        let leaf = String(absolute[absolute.index(after: slash)...])
        let folder = try SafeWalk.openFolder(
            FilePath(slash == absolute.startIndex ? "/" : String(absolute[..<slash])), trust: trust, describe: failure)
        var named = stat()
        guard fstatat(folder.rawValue, leaf, &named, AT_SYMLINK_NOFOLLOW) == 0 else {
            throw failure("cannot read it (\(Errno(rawValue: errno))); give a policy file or one of: \(builtins)")
        }
        // With no app to distrust, a link is the user's own and is followed;
        // otherwise it could be one the app made, pointing into its own folders.
        let isLink = named.st_mode & S_IFMT == S_IFLNK
        if isLink, !trust.followsEveryLink {
            throw failure("is a symbolic link; give the policy file it points to")
        }
        if !isLink, let refusal = refuse(named) { throw refusal }
        let fd = openat(folder.rawValue, leaf, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (isLink ? 0 : O_NOFOLLOW))
        guard fd >= 0 else {
            throw failure("cannot read it (\(Errno(rawValue: errno))); give a policy file or one of: \(builtins)")
        }
        let file = OwnedDescriptor(taking: fd)
        let opened: stat
        do {
            opened = try file.status()
        } catch {
            throw failure("cannot read it (\(error))")
        }
        if let refusal = refuse(opened) { throw refusal }
        if !trust.followsEveryLink {
            let problem: String?
            if let reason = trust.appMayHaveWritten(folder) {
                problem = "it lies \(reason)"
            } else if let reason = trust.ownershipRefusal(ofFile: opened, in: folder) {
                problem = reason
            } else if opened.st_nlink > 1 {
                problem = "it has \(opened.st_nlink) names (hard links), and one may lie where the app can write"
            } else {
                problem = nil
            }
            if let problem {
                throw failure("\(problem), so the policy could have been written by someone other than you. "
                    + "Keep policy files of your own, outside the app's folders, writable by you alone.")
            }
        }
        let limit = PropertyListReader.maxBytes
        guard opened.st_size <= limit else { throw failure("larger than 1 MiB; a policy is a few lines") }
        // Sized from fstat, but the file may change: grow up to one byte past the limit.
        var bytes = [UInt8](repeating: 0, count: Int(max(0, min(opened.st_size, limit))) + 1)
        var filled = 0
        while true {
            if filled == bytes.count {
                guard bytes.count <= limit else { break }
                bytes += [UInt8](repeating: 0, count: min(bytes.count, limit + 1 - bytes.count))
            }
            let count: Int
            do {
                count = try bytes.withUnsafeMutableBytes { buffer throws(Errno) in
                    try syscallRetrying { read(file.rawValue, buffer.baseAddress! + filled, buffer.count - filled) }
                }
            } catch {
                throw failure("read failed: \(error)")
            }
            if count == 0 { break }
            filled += count
        }
        guard filled <= limit else { throw failure("larger than 1 MiB; a policy is a few lines") }
        bytes.removeSubrange(filled...)
        do {
            try self.init(data: bytes, source: path)
        } catch {
            throw .policy(error)
        }
    }

    /// Decodes a policy from an XML or binary property list (such as a macOS
    /// `.entitlements` file) or from JSON with the same keys. Any bytes are
    /// safe to give: see `PropertyListReader` for the limits.
    public init(data: [UInt8], source: String) throws(PolicyError) {
        let raw = try PropertyListReader.read(data, source: source)
        self.init(source: source)
        try apply(raw)
    }

    private mutating func apply(_ raw: [String: PolicyValue]) throws(PolicyError) {
        func fail(_ key: String, _ problem: String) -> PolicyError {
            PolicyError(file: source, key: key, problem: problem)
        }
        func bool(_ key: String) throws(PolicyError) -> Bool? {
            guard let value = raw[key] else { return nil }
            guard case .bool(let flag) = value else { throw fail(key, "expected a boolean (<true/> or <false/>), found \(value.kind)") }
            return flag
        }
        func strings(_ key: String) throws(PolicyError) -> [String]? {
            guard let value = raw[key] else { return nil }
            guard case .array(let items) = value else { throw fail(key, "expected an array of strings, found \(value.kind)") }
            var result: [String] = []
            for (index, item) in items.enumerated() {
                guard case .string(let text) = item else { throw fail(key, "item \(index) should be a string, found \(item.kind)") }
                result.append(text)
            }
            return result
        }
        func ports(_ key: String) throws(PolicyError) -> [UInt16]? {
            guard let value = raw[key] else { return nil }
            guard case .array(let items) = value else { throw fail(key, "expected an array of port numbers, found \(value.kind)") }
            var result: [UInt16] = []
            for (index, item) in items.enumerated() {
                guard case .integer(let port) = item, (1...65535).contains(port) else {
                    throw fail(key, "item \(index) should be a port number from 1 to 65535, found \(item.kind)")
                }
                result.append(UInt16(port))
            }
            return result
        }

        if let value = raw["org.sandboxed-run.policy-version"] {
            guard case .integer(let version) = value else { throw fail("org.sandboxed-run.policy-version", "expected an integer, found \(value.kind)") }
            guard version == Policy.currentVersion else {
                throw fail("org.sandboxed-run.policy-version", "version \(version) is not supported; this sandboxed-run reads version \(Policy.currentVersion)")
            }
            self.version = version
        }
        switch try bool("com.apple.security.app-sandbox") {
        case false?:
            throw fail("com.apple.security.app-sandbox", "is false, but sandboxed-run always sandboxes: set it to <true/> or remove it")
        case nil:
            warnings.append("com.apple.security.app-sandbox is absent; sandboxed-run sandboxes anyway")
        case true?:
            break
        }
        let readWrite = try bool("com.apple.security.files.user-selected.read-write") ?? false
        let readOnly = try bool("com.apple.security.files.user-selected.read-only") ?? false
        userSelectedAccess = readWrite ? .readWrite : (readOnly ? .readOnly : nil)
        bookmarksAppScope = try bool(Policy.bookmarksAppScopeKey) ?? false
        networkClient = try bool("com.apple.security.network.client") ?? false
        networkServer = try bool("com.apple.security.network.server") ?? false
        symbolicLinks = try bool(Policy.symbolicLinksKey) ?? false
        executeFiles = try bool(Policy.executeFilesKey) ?? false
        reviewChanges = try bool(Policy.reviewKey) ?? false
        tcpConnectPorts = try ports("org.sandboxed-run.network.tcp-connect-ports")
        tcpBindPorts = try ports("org.sandboxed-run.network.tcp-bind-ports")
        if let entries = try strings(Policy.allowedHostsKey) {
            var hosts: [AllowedHost] = []
            for entry in entries {
                do { hosts.append(try AllowedHost(parsing: entry)) } catch { throw fail(Policy.allowedHostsKey, error.description) }
            }
            allowedHosts = hosts
        }
        if tcpConnectPorts != nil, !networkClient {
            throw fail("org.sandboxed-run.network.tcp-connect-ports", "needs com.apple.security.network.client set to <true/>")
        }
        if tcpBindPorts != nil, !networkServer {
            throw fail("org.sandboxed-run.network.tcp-bind-ports", "needs com.apple.security.network.server set to <true/>")
        }

        for access in PathAccess.allCases {
            let key = "org.sandboxed-run.system-paths.\(access.rawValue)"
            for path in try strings(key) ?? [] {
                // Bytes, as the kernel splits the path: split by Characters, "/../\u{301}etc"
                // has no ".." component, since "/" and the combining accent make one Character.
                let components = path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
                guard path.utf8.first == UInt8(ascii: "/"), !components.contains(where: { $0.elementsEqual("..".utf8) }) else {
                    throw fail(key, "'\(PropertyListReader.printable(path))' must be an absolute path without '..'")
                }
                systemPaths.append(SystemPath(path: path, access: access))
            }
        }
        let syscallsKey = "org.sandboxed-run.syscalls.allow"
        for name in try strings(syscallsKey) ?? [] {
            if let reason = SyscallFilter.neverAllowed[name] {
                throw fail(syscallsKey, "'\(name)' can never be allowed: \(reason)")
            }
            if let reason = SyscallFilter.argumentFiltered[name] {
                throw fail(syscallsKey, "'\(name)' can never be allowed whole: \(reason); remove it, the sandbox already allows what it can")
            }
            guard SyscallFilter.isKnown(name) else {
                throw fail(syscallsKey, "'\(PropertyListReader.printable(name))' is not a syscall this system knows")
            }
            extraSyscalls.append(name)
        }

        let limitsKey = "org.sandboxed-run.limits"
        if let value = raw[limitsKey] {
            guard case .dictionary(let entries) = value else {
                throw fail(limitsKey, "expected a dictionary of limit names and integers, found \(value.kind)")
            }
            let names = ResourceLimit.allCases.map(\.rawValue).joined(separator: ", ")
            for (name, entry) in entries.sorted(by: { $0.key < $1.key }) {
                guard let limit = ResourceLimit(rawValue: name) else {
                    throw fail(limitsKey, "unknown limit '\(PropertyListReader.printable(name))'; the limits are \(names)")
                }
                guard case .integer(let number) = entry, number >= 0 else {
                    throw fail(limitsKey, "'\(name)' should be an integer from 0 to \(Int.max), found \(entry.kind)")
                }
                limits[limit] = UInt64(number)
            }
        }

        let known: Set<String> = [
            "org.sandboxed-run.policy-version", "com.apple.security.app-sandbox",
            "com.apple.security.files.user-selected.read-write", "com.apple.security.files.user-selected.read-only",
            "com.apple.security.network.client", "com.apple.security.network.server",
            "org.sandboxed-run.network.tcp-connect-ports", "org.sandboxed-run.network.tcp-bind-ports",
            "org.sandboxed-run.system-paths.read-execute", "org.sandboxed-run.system-paths.read-only",
            "org.sandboxed-run.system-paths.read-write", syscallsKey, limitsKey, Policy.symbolicLinksKey,
            Policy.executeFilesKey, Policy.bookmarksAppScopeKey, Policy.reviewKey, Policy.allowedHostsKey,
        ]
        for key in raw.keys.sorted() where !known.contains(key) {
            if key.hasPrefix(Policy.ownPrefix) {
                throw fail(PropertyListReader.printable(key), "unknown key (a typo?); see the policy format in docs/policy.md")
            }
            // Keys are the file's text, printed to a terminal: escaped.
            warnings.append("ignoring \(PropertyListReader.printable(key)): sandboxed-run has no equivalent")
        }
    }
}

@preconcurrency import Glibc
import FoundationEssentials
import SystemPackage
import Policies

extension Policy {
    public static let currentVersion = 1
    static let ownPrefix = "org.sandboxed-run."

    /// The policy `run` uses when `--policy` is absent.
    public static var defaultPolicy: Policy {
        // The embedded files are checked by the tests; failing here is a build defect.
        try! builtin(named: BuiltinPolicies.defaultName)!
    }

    /// A policy shipped in `Policies/`, by name (`writer`, `read-only`, `networked`).
    public static func builtin(named name: String) throws(PolicyError) -> Policy? {
        guard let entry = BuiltinPolicies.all.first(where: { $0.name == name }) else { return nil }
        return try Policy(data: entry.plist, source: "builtin:\(name)")
    }

    /// Reads a policy file: a property list, a macOS `.entitlements` file or JSON.
    public init(contentsOfFile path: String) throws(SandboxError) {
        func failure(_ problem: String) -> SandboxError {
            .policy(PolicyError(file: path, key: nil, problem: problem))
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw failure("cannot read it (\(Errno(rawValue: errno))); give a file path or one of: "
                + BuiltinPolicies.all.map(\.name).joined(separator: ", "))
        }
        let file = OwnedDescriptor(taking: fd)
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count: Int
            do {
                count = try syscallRetrying { read(file.rawValue, &chunk, chunk.count) }
            } catch {
                throw failure("read failed: \(error)")
            }
            if count == 0 { break }
            bytes += chunk[0..<count]
            guard bytes.count <= 1 << 20 else { throw failure("larger than 1 MiB; a policy is a few lines") }
        }
        do {
            try self.init(data: bytes, source: path)
        } catch {
            throw .policy(error)
        }
    }

    /// Decodes a policy from an XML or binary property list (such as a macOS
    /// `.entitlements` file) or from JSON with the same keys.
    public init(data: [UInt8], source: String) throws(PolicyError) {
        let raw: [String: PolicyValue]
        do {
            let bytes = Data(data)
            let first = data.first { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }
            if first == UInt8(ascii: "{") {
                raw = try JSONDecoder().decode([String: PolicyValue].self, from: bytes)
            } else {
                raw = try PropertyListDecoder().decode([String: PolicyValue].self, from: bytes)
            }
        } catch {
            throw PolicyError(
                file: source, key: nil,
                problem: "not a property list dictionary or JSON object (\(error)). "
                    + "Start from one of the files in Policies/.")
        }
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
        networkClient = try bool("com.apple.security.network.client") ?? false
        networkServer = try bool("com.apple.security.network.server") ?? false
        tcpConnectPorts = try ports("org.sandboxed-run.network.tcp-connect-ports")
        tcpBindPorts = try ports("org.sandboxed-run.network.tcp-bind-ports")
        if tcpConnectPorts != nil, !networkClient {
            throw fail("org.sandboxed-run.network.tcp-connect-ports", "needs com.apple.security.network.client set to <true/>")
        }
        if tcpBindPorts != nil, !networkServer {
            throw fail("org.sandboxed-run.network.tcp-bind-ports", "needs com.apple.security.network.server set to <true/>")
        }

        for access in PathAccess.allCases {
            let key = "org.sandboxed-run.system-paths.\(access.rawValue)"
            for path in try strings(key) ?? [] {
                guard path.hasPrefix("/"), !path.split(separator: "/").contains("..") else {
                    throw fail(key, "'\(path)' must be an absolute path without '..'")
                }
                systemPaths.append(SystemPath(path: path, access: access))
            }
        }
        let syscallsKey = "org.sandboxed-run.syscalls.allow"
        for name in try strings(syscallsKey) ?? [] {
            if let reason = SyscallFilter.neverAllowed[name] {
                throw fail(syscallsKey, "'\(name)' can never be allowed: \(reason)")
            }
            guard SyscallFilter.isKnown(name) else {
                throw fail(syscallsKey, "'\(name)' is not a syscall this system knows")
            }
            extraSyscalls.append(name)
        }

        let known: Set<String> = [
            "org.sandboxed-run.policy-version", "com.apple.security.app-sandbox",
            "com.apple.security.files.user-selected.read-write", "com.apple.security.files.user-selected.read-only",
            "com.apple.security.network.client", "com.apple.security.network.server",
            "org.sandboxed-run.network.tcp-connect-ports", "org.sandboxed-run.network.tcp-bind-ports",
            "org.sandboxed-run.system-paths.read-execute", "org.sandboxed-run.system-paths.read-only",
            "org.sandboxed-run.system-paths.read-write", syscallsKey,
        ]
        for key in raw.keys.sorted() where !known.contains(key) {
            if key.hasPrefix(Policy.ownPrefix) {
                throw fail(key, "unknown key (a typo?); see the policy format in README.md")
            }
            warnings.append("ignoring \(key): sandboxed-run has no equivalent")
        }
    }
}

/// One value of a property list or JSON policy, for type-checked reading.
enum PolicyValue: Decodable {
    case bool(Bool)
    case integer(Int)
    case string(String)
    case array([PolicyValue])
    case dictionary([String: PolicyValue])
    case other

    init(from decoder: any Decoder) throws {
        // Most values are strings in arrays, then booleans: try the common
        // shapes first, since every failed attempt costs a thrown error.
        if let single = try? decoder.singleValueContainer() {
            if let text = try? single.decode(String.self) {
                self = .string(text)
                return
            }
            if let flag = try? single.decode(Bool.self) {
                self = .bool(flag)
                return
            }
            if let number = try? single.decode(Int.self) {
                self = .integer(number)
                return
            }
        }
        if var list = try? decoder.unkeyedContainer() {
            var items: [PolicyValue] = []
            while !list.isAtEnd { items.append(try list.decode(PolicyValue.self)) }
            self = .array(items)
        } else if let dict = try? decoder.singleValueContainer().decode([String: PolicyValue].self) {
            self = .dictionary(dict)
        } else {
            self = .other  // dates, data, reals: only meaningful in keys we ignore
        }
    }

    var kind: String {
        switch self {
        case .bool(let flag): "boolean \(flag)"
        case .integer(let number): "integer \(number)"
        case .string(let text): "string '\(text)'"
        case .array: "an array"
        case .dictionary: "a dictionary"
        case .other: "a value of another type"
        }
    }
}

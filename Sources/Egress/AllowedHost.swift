/// One entry of an allowed-hosts list (`run --allow-host`, the policy key
/// `org.sandboxed-run.network.allowed-hosts`): a name, `*.suffix` or an IP
/// address, and the ports it may be reached on (443 and 80 when none is given).
///
/// Names are checked as strictly as a DNS host name: lowercase ASCII letters,
/// digits, `-` and `_` in labels of 1–63 bytes, 253 in all. A name whose last
/// label is all digits or hexadecimal-looking (`127.1`, `0x7f.1`, `2130706433`)
/// is an address in disguise, which `getaddrinfo` would read as one: refused.
public struct AllowedHost: Hashable, Sendable, CustomStringConvertible {
    public enum Name: Hashable, Sendable {
        /// This name only; the proxy may reach it at any address, private ones
        /// included (the entry names it explicitly).
        case exact(String)
        /// Any name ending in `.suffix` (not the suffix itself); never at a
        /// loopback, private, link-local or unique-local address.
        case suffix(String)
        /// This address only (an IP literal is refused unless listed).
        case address(IPAddress)
    }

    public let name: Name
    /// Sorted, without repeats.
    public let ports: [UInt16]

    /// The ports of an entry that names none: HTTPS and HTTP.
    public static let defaultPorts: [UInt16] = [80, 443]

    public init(name: Name, ports: [UInt16]) {
        self.name = name
        self.ports = Array(Set(ports)).sorted()
    }

    /// `HOST`, `HOST:PORT`, `*.SUFFIX[:PORT]`, `IPV4[:PORT]`, `[IPV6][:PORT]`.
    public init(parsing text: String) throws(EgressError) {
        func bad(_ why: String) -> EgressError { .invalidHost(entry: text, why) }
        guard !text.isEmpty else { throw bad("it is empty") }
        guard text.utf8.count <= 300, text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw bad("an entry is ASCII without spaces (a name beyond ASCII goes in its xn-- form)")
        }
        var host = Substring(text)
        var port: UInt16?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { throw bad("an IPv6 address in [ ] lacks its ]") }
            let rest = host[host.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { throw bad("after ] comes :PORT or nothing") }
                port = try Self.port(rest.dropFirst(), entry: text)
            }
            guard let address = IPAddress(String(host[host.index(after: host.startIndex)..<close])), address.isV6 else {
                throw bad("[\(host[host.index(after: host.startIndex)..<close])] is not an IPv6 address")
            }
            self.init(name: .address(address), ports: port.map { [$0] } ?? Self.defaultPorts)
            return
        }
        if let colon = host.lastIndex(of: ":") {
            guard host.firstIndex(of: ":") == colon else { throw bad("an IPv6 address goes in [ ], as [::1]:8080") }
            port = try Self.port(host[host.index(after: colon)...], entry: text)
            host = host[..<colon]
        }
        let ports = port.map { [$0] } ?? Self.defaultPorts
        if let address = IPAddress(String(host)) {
            self.init(name: .address(address), ports: ports)
            return
        }
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if name.hasPrefix("*.") {
            let suffix = String(name.dropFirst(2))
            try Self.checkName(suffix, entry: text)
            self.init(name: .suffix(suffix), ports: ports)
            return
        }
        guard !name.contains("*") else { throw bad("a wildcard is only a first label of its own, as *.example.com") }
        try Self.checkName(name, entry: text)
        guard name != "localhost", !name.hasSuffix(".localhost") else {
            throw bad("inside the sandbox, localhost is the sandbox's own loopback, reached without the proxy; "
                + "name the host by another name or by its address")
        }
        self.init(name: .exact(name), ports: ports)
    }

    private static func port(_ text: Substring, entry: String) throws(EgressError) -> UInt16 {
        guard let port = Destination.port(text) else {
            throw .invalidHost(entry: entry, "the port \"\(text)\" is not a number from 1 to 65535")
        }
        return port
    }

    /// Whether `name` (lowercase, no final dot) is a host name the proxy
    /// would resolve: nil when it is, else why not.
    static func problem(name: String) -> String? {
        guard !name.isEmpty else { return "the name is empty" }
        guard name.utf8.count <= 253 else { return "a name has at most 253 bytes" }
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        for label in labels {
            guard !label.isEmpty else { return "a name has no empty label (\"..\", or a leading dot)" }
            guard label.utf8.count <= 63 else { return "a label has at most 63 bytes" }
            guard label.utf8.allSatisfy({ byte in
                (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D || byte == 0x5F
            }) else { return "a name holds letters, digits, - and _ only" }
            guard label.first != "-", label.last != "-" else { return "a label neither starts nor ends with -" }
        }
        // getaddrinfo reads 127.1, 0x7f.1 and 2130706433 as addresses.
        let last = labels.last!
        if last.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) || (last.hasPrefix("0x") && last.dropFirst(2).allSatisfy(\.isHexDigit)) {
            return "its last label is a number: an address in disguise (write an address as 192.0.2.1 or [2001:db8::1])"
        }
        return nil
    }

    private static func checkName(_ name: String, entry: String) throws(EgressError) {
        if let problem = problem(name: name) { throw .invalidHost(entry: entry, problem) }
    }

    /// Whether this entry allows `host` (a name, lowercase, no final dot)
    /// on `port`.
    public func allows(_ host: Destination.Host, port: UInt16) -> Bool {
        guard ports.contains(port) else { return false }
        switch (name, host) {
        case (.exact(let allowed), .name(let name)): return allowed == name
        case (.suffix(let suffix), .name(let name)):
            return name.utf8.count > suffix.utf8.count + 1 && name.hasSuffix("." + suffix)
        case (.address(let allowed), .address(let address)): return allowed == address
        default: return false
        }
    }

    /// Whether DNS inside the sandbox answers `name` (any port).
    func resolves(_ name: String) -> Bool {
        switch self.name {
        case .exact(let allowed): return allowed == name
        case .suffix(let suffix): return name.utf8.count > suffix.utf8.count + 1 && name.hasSuffix("." + suffix)
        case .address: return false
        }
    }

    public var description: String {
        let host: String
        switch name {
        case .exact(let name): host = name
        case .suffix(let suffix): host = "*." + suffix
        case .address(let address): host = address.isV6 ? "[\(address)]" : address.description
        }
        return ports == Self.defaultPorts ? host : ports.map { "\(host):\($0)" }.joined(separator: ", ")
    }
}

/// Where the command asked to go: a CONNECT target, an absolute URI's
/// authority, a SOCKS name or address, or a captured connection's name.
public struct Destination: Hashable, Sendable, CustomStringConvertible {
    public enum Host: Hashable, Sendable {
        case name(String)
        case address(IPAddress)
    }

    public let host: Host
    public let port: UInt16

    public init(host: Host, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// An authority as a client sends it (`name:port`, `[v6]:port`), or nil
    /// with why not. `defaultPort` applies when no port is given.
    public static func parse(authority: String, defaultPort: UInt16?) -> Result<Destination, EgressError> {
        func bad(_ why: String) -> Result<Destination, EgressError> { .failure(.invalidDestination(Printable.message(authority), why)) }
        guard !authority.isEmpty, authority.utf8.count <= 300, authority.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return bad("a host is ASCII without spaces, at most 300 bytes")
        }
        var hostText = Substring(authority)
        var port = defaultPort
        if hostText.hasPrefix("[") {
            guard let close = hostText.firstIndex(of: "]") else { return bad("an IPv6 address lacks its ]") }
            let rest = hostText[hostText.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":"), let value = Self.port(rest.dropFirst()) else { return bad("the port is not a number from 1 to 65535") }
                port = value
            }
            guard let address = IPAddress(String(hostText.dropFirst().prefix(upTo: close))), address.isV6 else {
                return bad("not an IPv6 address in [ ]")
            }
            guard let port else { return bad("no port") }
            return .success(Destination(host: .address(address), port: port))
        }
        if let colon = hostText.lastIndex(of: ":") {
            guard hostText.firstIndex(of: ":") == colon else { return bad("an IPv6 address goes in [ ]") }
            guard let value = Self.port(hostText[hostText.index(after: colon)...]) else { return bad("the port is not a number from 1 to 65535") }
            port = value
            hostText = hostText[..<colon]
        }
        guard let port else { return bad("no port") }
        return host(String(hostText)).map { Destination(host: $0, port: port) }
    }

    /// A host as a client names it (no port): an address, or a checked name.
    public static func host(_ text: String) -> Result<Host, EgressError> {
        if let address = IPAddress(text) { return .success(.address(address)) }
        var name = text.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if let problem = AllowedHost.problem(name: name) { return .failure(.invalidDestination(Printable.message(text), problem)) }
        return .success(.name(name))
    }

    static func port(_ text: Substring) -> UInt16? {
        guard !text.isEmpty, text.count <= 5, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = Int(text), value >= 1, value <= 65535
        else { return nil }
        return UInt16(value)
    }

    public var hostText: String {
        switch host {
        case .name(let name): return name
        case .address(let address): return address.isV6 ? "[\(address)]" : address.description
        }
    }

    public var description: String { "\(hostText):\(port)" }
}

/// An allowed-hosts list: what the proxy, the DNS stub and the captured
/// ports all decide by.
public struct AllowedHosts: Hashable, Sendable {
    public let entries: [AllowedHost]

    public init(_ entries: [AllowedHost]) {
        self.entries = entries
    }

    /// The entry that allows `destination`, if any (an exact name before a suffix).
    public func entry(for destination: Destination) -> AllowedHost? {
        entries.first { entry in
            if case .exact = entry.name { return entry.allows(destination.host, port: destination.port) }
            return false
        } ?? entries.first { $0.allows(destination.host, port: destination.port) }
    }

    /// Whether DNS in the sandbox answers `name`.
    public func resolves(_ name: String) -> Bool { entries.contains { $0.resolves(name) } }

    /// Every port some entry names, sorted.
    public var ports: [UInt16] { Array(Set(entries.flatMap(\.ports))).sorted() }
}

import SystemKit

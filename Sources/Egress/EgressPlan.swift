/// What a launch with an allowed-hosts list needs before the command starts:
/// the sockets the keeper makes in the sandbox's network namespace, the
/// ports the command may connect to there, and the proxy variables.
public struct EgressPlan: Hashable, Sendable {
    public enum Kind: Hashable, Sendable {
        /// HTTP CONNECT and absolute-form HTTP/1.1, on 127.0.0.1.
        case http
        /// SOCKS5 with names, on 127.0.0.1.
        case socks
        /// The DNS stub, UDP on 127.0.0.1:53.
        case dns
        /// Connections to an allowed port on any address of the sandbox's
        /// loopback: those to a name's captured address are tunnelled there.
        case captured
    }

    /// One socket the keeper makes: IPv4, `0.0.0.0` or `127.0.0.1`.
    public struct Listener: Hashable, Sendable {
        public let kind: Kind
        public let address: [UInt8]
        public let port: UInt16
        public var isDatagram: Bool { kind == .dns }
    }

    public let hosts: AllowedHosts
    public let listeners: [Listener]
    public let httpPort: UInt16
    public let socksPort: UInt16

    public init(hosts: AllowedHosts) {
        self.hosts = hosts
        let taken = Set(hosts.ports)
        // Codex's ports, unless an allowed port is one of them.
        var http: UInt16 = 3128
        while taken.contains(http) { http += 1 }
        var socks: UInt16 = 1080
        while taken.contains(socks) || socks == http { socks += 1 }
        httpPort = http
        socksPort = socks
        let loopback: [UInt8] = [127, 0, 0, 1]
        listeners = [
            Listener(kind: .http, address: loopback, port: http),
            Listener(kind: .socks, address: loopback, port: socks),
            Listener(kind: .dns, address: loopback, port: 53),
        ] + hosts.ports.map { Listener(kind: .captured, address: [0, 0, 0, 0], port: $0) }
    }

    /// The TCP ports the command may connect to (Landlock): the proxy's and
    /// the captured ones, all on its own loopback.
    public var commandPorts: [UInt16] { Array(Set([httpPort, socksPort] + hosts.ports)).sorted() }

    /// The variables that point programs at the proxy, in both cases, and
    /// those pip, npm and git read besides.
    public var environment: [(String, String)] {
        let http = "http://127.0.0.1:\(httpPort)"
        let socks = "socks5h://127.0.0.1:\(socksPort)"
        let direct = "localhost,127.0.0.1,::1"
        var variables: [(String, String)] = []
        for (name, value) in [("HTTP_PROXY", http), ("HTTPS_PROXY", http), ("ALL_PROXY", socks), ("NO_PROXY", direct)] {
            variables.append((name, value))
            variables.append((name.lowercased(), value))
        }
        variables += [
            ("PIP_PROXY", http),
            ("npm_config_proxy", http), ("npm_config_https_proxy", http), ("npm_config_noproxy", direct),
        ]  // git reads http_proxy, https_proxy, all_proxy and no_proxy
        return variables
    }
}

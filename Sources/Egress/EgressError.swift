/// What is wrong with an allowed-hosts list, or with where a command asked to go.
public enum EgressError: Error, Equatable, Sendable, CustomStringConvertible {
    /// An entry of `--allow-host` or the policy key that is not a host.
    case invalidHost(entry: String, String)
    /// A destination a client named that is not a host (shown escaped).
    case invalidDestination(String, String)
    /// The gateway could not start: which step, with errno.
    case setup(step: String, errno: Int32)

    public var description: String {
        switch self {
        case .invalidHost(let entry, let why):
            return "allowed host \"\(Printable.message(entry))\": \(why); an entry is NAME, NAME:PORT, *.SUFFIX[:PORT], "
                + "an IPv4 address or [IPv6][:PORT] (ports 80 and 443 when none is given)"
        case .invalidDestination(let host, let why): return "\"\(host)\" is not a host: \(why)"
        case .setup(let step, let errno): return "the network proxy: \(step) failed (errno \(errno))"
        }
    }
}

import SystemKit

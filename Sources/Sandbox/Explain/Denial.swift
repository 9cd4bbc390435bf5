import Glibc
import SystemPackage

/// One operation the sandbox refused (or, from the observer, will refuse),
/// explained in the user's terms: which layer, and what would allow it.
public struct Denial: Sendable, Hashable {
    public enum Operation: String, Sendable {
        case read, write, execute, metadata, syscall, network
        /// A rename or hard link into another folder (Landlock's reparenting
        /// rule), or a symbolic link made, moved or linked where the policy
        /// allows none (`link` for symlink and link, `rename` for a rename).
        case rename, link
    }

    /// Who refuses: the kernel's Landlock rules, the seccomp filter, the
    /// launcher's metadata supervisor, or the private view (where the path
    /// does not exist, or its folder is one of the view's read-only own).
    public enum Layer: String, Sendable {
        case landlock = "Landlock"
        case syscallFilter = "syscall filter"
        case supervisor = "supervisor"
        case view = "private view"
        /// The network by name: the launcher's proxy, its DNS stub or a captured port.
        case proxy = "network proxy"
    }

    public let operation: Operation
    public let layer: Layer
    /// The syscall's name, as the kernel's table has it.
    public let syscall: String
    /// The path as the command gave it, exact bytes (nil for a syscall or a
    /// socket). Bytes, not a `FilePath`, which would normalize "//" away.
    public let path: [UInt8]?
    /// Why, and what would allow it: "is in grant VAULT, which is read-only".
    public let reason: String
    /// The errno the command receives.
    public let errno: Int32
    /// Where a rename or link was to go, exact bytes.
    public let destination: [UInt8]?
    /// Set when the call is a known probe that programs make and get on
    /// without (bash's look at /dev/tty, glibc's at the nscd socket): what
    /// it is. Reported all the same, marked, so that real causes stand out.
    public let probe: String?

    public init(
        operation: Operation, layer: Layer, syscall: String, path: [UInt8]?, reason: String, errno: Int32,
        destination: [UInt8]? = nil, probe: String? = nil
    ) {
        self.operation = operation
        self.layer = layer
        self.syscall = syscall
        self.path = path
        self.reason = reason
        self.errno = errno
        self.destination = destination
        self.probe = probe
    }

    /// The same denial, marked as the probe `what`.
    func probe(_ what: String) -> Denial {
        Denial(operation: operation, layer: layer, syscall: syscall, path: path, reason: reason, errno: errno, destination: destination, probe: what)
    }

    /// The line for a terminal, escaped: paths are the command's choice.
    public var message: String {
        // A line should stay a line: very long paths are cut (the JSON "path" stays exact).
        func shown(_ path: [UInt8]) -> String {
            path.count <= Self.shownBytes ? Printable.path(bytes: path)
                : Printable.path(bytes: Array(path.prefix(Self.shownBytes))) + "… (\(path.count) bytes)"
        }
        var subject = path.map(shown) ?? syscall
        if let destination { subject += " -> " + shown(destination) }
        if let probe {
            return "expected probe, harmless: \(operation.rawValue) denied: \(subject) [\(layer.rawValue), \(syscall)]: \(probe)"
        }
        return "\(operation.rawValue) denied: \(subject)\(reason.hasPrefix(" ") ? "" : ": ")\(reason) [\(layer.rawValue), \(syscall)]"
    }

    static let shownBytes = 512

    /// One JSON object, keys sorted; a path that is not UTF-8 is `{"text","hex"}`.
    public var json: String {
        var fields: [(String, String)] = [
            ("errno", String(errno)), ("layer", JSONText.quote(layer.rawValue)), ("message", JSONText.quote(message)),
            ("operation", JSONText.quote(operation.rawValue)), ("reason", JSONText.quote(reason)),
            ("syscall", JSONText.quote(syscall)), ("type", JSONText.quote("denial")),
        ]
        if let path { fields.append(("path", JSONText.path(path))) }
        if let destination { fields.append(("destination", JSONText.path(destination))) }
        if let probe { fields.append(("probe", JSONText.quote(probe))) }
        return JSONText.object(fields.sorted { $0.0 < $1.0 })
    }
}

/// JSON lines without Foundation: strings escaped as RFC 8259 asks.
enum JSONText {
    static func quote(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F || scalar.value == 0x2028 || scalar.value == 0x2029:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// A path's exact text, or `{"hex":..., "text":...}` when it is not UTF-8.
    static func path(_ bytes: [UInt8]) -> String {
        if let text = String(validating: bytes, as: UTF8.self) { return quote(text) }
        return object([("hex", quote(Printable.hex(bytes))), ("text", quote(String(decoding: bytes, as: UTF8.self)))])
    }

    static func object(_ fields: [(String, String)]) -> String {
        "{" + fields.map { "\(quote($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }
}

extension Denial {
    /// A refusal of the network by name: the destination stands where a
    /// path would, the route where a syscall's name would.
    init(_ refusal: EgressRefusal) {
        self.init(
            operation: .network, layer: .proxy, syscall: refusal.route.rawValue, path: Array(refusal.destination.utf8),
            reason: refusal.reason, errno: EACCES)
    }
}

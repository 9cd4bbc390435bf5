/// The addresses the DNS stub hands out for allowed names, in 127.77.0.0/16
/// of the sandbox's own loopback: a connection captured there is tunnelled to
/// the name the address stands for. For tools that ignore the proxy variables.
struct NameTable: Sendable {
    /// 127.77.0.1 onwards; a bound on names so that a command asking for
    /// endless names under a wildcard cannot grow the launcher.
    static let prefix: (UInt8, UInt8) = (127, 77)
    static let capacity = 4_096

    private var addresses: [String: IPAddress] = [:]
    private var names: [IPAddress: String] = [:]

    /// The address standing for `name`, given out now if it has none; nil
    /// when the table is full.
    mutating func address(for name: String) -> IPAddress? {
        if let known = addresses[name] { return known }
        guard addresses.count < Self.capacity else { return nil }
        let index = addresses.count + 1
        let address = IPAddress(bytes: [Self.prefix.0, Self.prefix.1, UInt8(index >> 8), UInt8(index & 0xFF)])!
        addresses[name] = address
        names[address] = name
        return address
    }

    /// The name an address stands for, if the stub gave it out.
    func name(for address: IPAddress) -> String? { names[address] }
}

/// The DNS stub's answers, from the bytes of one query: only allowed names
/// resolve (A to a captured address, AAAA to nothing); anything else, TXT and
/// every other type included, is REFUSED; nothing is ever asked upstream, so
/// no query carries data out.
enum DNSAnswer {
    enum Code: UInt8 {
        case noError = 0, formatError = 1, serverFailure = 2, notImplemented = 4, refused = 5
    }

    /// What the stub makes of a query: the reply's bytes (nil: dropped, it is
    /// no query), and the name when one was refused (for --explain).
    struct Outcome {
        var reply: [UInt8]?
        var refused: (name: String, type: UInt16)?
    }

    static let ttl: UInt32 = 300

    static func answer(_ query: [UInt8], hosts: AllowedHosts, names: inout NameTable) -> Outcome {
        // A header, a query (QR clear), one question.
        guard query.count >= 12, query.count <= 4_096, query[2] & 0x80 == 0 else { return Outcome(reply: nil) }
        func reply(_ code: Code, question: ArraySlice<UInt8> = [], answer: [UInt8] = []) -> [UInt8] {
            var out: [UInt8] = [query[0], query[1]]
            out.append(0x80 | (query[2] & 0x79) | 0x04)  // QR, the opcode and RD echoed, AA
            out.append(0x80 | code.rawValue)             // RA
            out += [0, question.isEmpty ? 0 : 1, 0, answer.isEmpty ? 0 : 1, 0, 0, 0, 0]
            return out + question + answer
        }
        let opcode = (query[2] >> 3) & 0x0F
        guard opcode == 0 else { return Outcome(reply: reply(.notImplemented)) }
        let questions = Int(query[4]) << 8 | Int(query[5])
        let answers = Int(query[6]) << 8 | Int(query[7]) | Int(query[8]) << 8 | Int(query[9])
        guard questions == 1, answers == 0 else { return Outcome(reply: reply(.formatError)) }
        // The name: labels, no compression (a query has nothing to point to).
        var at = 12
        var labels: [String] = []
        var length = 0
        while true {
            guard at < query.count else { return Outcome(reply: reply(.formatError)) }
            let size = Int(query[at])
            at += 1
            if size == 0 { break }
            guard size <= 63, at + size <= query.count else { return Outcome(reply: reply(.formatError)) }
            length += size + 1
            guard length <= 254 else { return Outcome(reply: reply(.formatError)) }
            labels.append(String(decoding: query[at..<at + size].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self))
            at += size
        }
        guard at + 4 <= query.count else { return Outcome(reply: reply(.formatError)) }
        let type = UInt16(query[at]) << 8 | UInt16(query[at + 1])
        let klass = UInt16(query[at + 2]) << 8 | UInt16(query[at + 3])
        let question = query[12..<at + 4]
        let name = labels.joined(separator: ".")
        // A name with bytes no host name has (a dot inside a label, controls,
        // beyond ASCII) is no allowed name.
        let valid = labels.allSatisfy { !$0.contains(".") } && AllowedHost.problem(name: name) == nil
        guard valid, klass == 1, hosts.resolves(name) else {
            return Outcome(reply: reply(.refused, question: question), refused: (name, type))
        }
        switch type {
        case 1:  // A
            guard let address = names.address(for: name) else { return Outcome(reply: reply(.serverFailure, question: question)) }
            var record: [UInt8] = [0xC0, 0x0C, 0, 1, 0, 1]
            record += [UInt8(ttl >> 24), UInt8(ttl >> 16 & 0xFF), UInt8(ttl >> 8 & 0xFF), UInt8(ttl & 0xFF), 0, 4]
            record += address.bytes
            return Outcome(reply: reply(.noError, question: question, answer: record))
        case 28:  // AAAA: none, so that clients use the IPv4 one
            return Outcome(reply: reply(.noError, question: question))
        default:
            return Outcome(reply: reply(.refused, question: question), refused: (name, type))
        }
    }
}

import Testing
@testable import Egress

/// The allowed-hosts list's entries, the DNS stub's answers, and which
/// addresses a wildcard may lead to: what every route decides by.
@Suite struct AllowedHostTests {
    @Test(arguments: [
        ("api.example.com", AllowedHost.Name.exact("api.example.com"), [UInt16(80), 443]),
        ("API.Example.COM.", .exact("api.example.com"), [80, 443]),
        ("vm:8765", .exact("vm"), [8765]),
        ("*.example.com:8443", .suffix("example.com"), [8443]),
        ("192.0.2.7:22", .address(IPAddress("192.0.2.7")!), [22]),
        ("[2001:db8::1]", .address(IPAddress("2001:db8::1")!), [80, 443]),
        ("[::1]:9000", .address(IPAddress("::1")!), [9000]),
    ])
    func entriesAreRead(text: String, name: AllowedHost.Name, ports: [UInt16]) throws {
        let entry = try AllowedHost(parsing: text)
        #expect(entry.name == name)
        #expect(entry.ports == ports)
    }

    /// Each with what the error must name.
    @Test(arguments: [
        ("", "empty"), ("*", "wildcard"), ("*.", "wildcard"), ("a.*.com", "wildcard"), ("host:0", "port"), ("host:65536", "port"),
        ("host:1e300", "port"), ("host:-1", "port"), ("host:", "port"), ("exa mple.com", "ASCII"), ("bücher.de", "xn--"),
        ("localhost", "loopback"), ("db.localhost:5432", "loopback"), ("127.1", "disguise"), ("0x7f.1", "disguise"),
        ("2130706433", "disguise"), ("a..b", "empty label"), ("-a.com", "-"), ("::1", "[ ]"), ("[::1", "]"), ("[1.2.3.4]", "IPv6"),
        ("evil.com\u{0}x", "ASCII"), (String(repeating: "a", count: 64) + ".com", "63"), (String(repeating: "a.", count: 130) + "com", "253"),
    ])
    func badEntriesAreRefusedWithTheReason(text: String, names: String) {
        #expect {
            try AllowedHost(parsing: text)
        } throws: { error in
            "\(error)".contains(names) && "\(error)".contains("an entry is NAME")
        }
    }

    @Test func namesMatchExactlyOrBeneathAWildcard() throws {
        let hosts = AllowedHosts([try AllowedHost(parsing: "api.example.com"), try AllowedHost(parsing: "*.cdn.test:8443")])
        func allowed(_ host: String, _ port: UInt16) -> Bool {
            guard case .success(let parsed) = Destination.host(host) else { return false }
            return hosts.entry(for: Destination(host: parsed, port: port)) != nil
        }
        #expect(allowed("api.example.com", 443) && allowed("API.example.com.", 80))
        #expect(!allowed("api.example.com", 22), "a port the entry does not name")
        #expect(!allowed("example.com", 443) && !allowed("xapi.example.com", 443) && !allowed("api.example.com.evil", 443))
        #expect(allowed("a.cdn.test", 8443) && allowed("a.b.cdn.test", 8443))
        #expect(!allowed("cdn.test", 8443), "the suffix itself is not beneath it")
        #expect(!allowed("evilcdn.test", 8443) && !allowed("a.cdn.test", 443))
        #expect(!allowed("93.184.216.34", 443), "an address nobody listed")
        #expect(hosts.resolves("x.cdn.test") && !hosts.resolves("cdn.test") && !hosts.resolves("other.test"))
    }

    @Test(arguments: [
        ("127.0.0.1", true), ("10.1.2.3", true), ("172.16.0.1", true), ("172.31.255.255", true), ("172.32.0.1", false),
        ("192.168.1.1", true), ("169.254.169.254", true), ("100.64.0.1", true), ("0.0.0.0", true), ("224.0.0.1", true),
        ("255.255.255.255", true), ("93.184.216.34", false), ("8.8.8.8", false), ("::1", true), ("::", true), ("fe80::1", true),
        ("fd00::1", true), ("fc00::1", true), ("::ffff:127.0.0.1", true), ("::ffff:10.0.0.1", true), ("::ffff:8.8.8.8", false),
        ("2606:4700::1111", false), ("64:ff9b::7f00:1", true), ("2002:7f00:1::", true), ("ff02::1", true),
    ])
    func internalAddressesAreKnown(address: String, isInternal: Bool) {
        #expect(IPAddress(address)!.isInternal == isInternal)
    }

    @Test func addressesAreReadStrictly() {
        for text in ["127.1", "0x7f.0.0.1", "0177.0.0.1", "2130706433", "1.2.3.4.5", "1.2.3", " 1.2.3.4", "::ffff:1.2.3"] {
            #expect(IPAddress(text) == nil, "\(text)")
        }
    }
}

@Suite struct DNSStubTests {
    static let hosts = AllowedHosts([try! AllowedHost(parsing: "api.example.com"), try! AllowedHost(parsing: "*.cdn.test")])

    /// A query as a resolver sends it: id 0x1234, RD, one question.
    static func query(_ name: String, type: UInt16 = 1, id: UInt16 = 0x1234) -> [UInt8] {
        var bytes: [UInt8] = [UInt8(id >> 8), UInt8(id & 0xFF), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]
        for label in name.split(separator: ".") {
            bytes.append(UInt8(label.utf8.count))
            bytes += Array(label.utf8)
        }
        return bytes + [0, UInt8(type >> 8), UInt8(type & 0xFF), 0, 1]
    }

    static func code(_ reply: [UInt8]?) -> UInt8? { reply.map { $0[3] & 0x0F } }
    static func answers(_ reply: [UInt8]?) -> Int { reply.map { Int($0[6]) << 8 | Int($0[7]) } ?? -1 }

    @Test func allowedNamesResolveToTheirCapturedAddressAndNothingElseDoes() {
        var names = NameTable()
        let first = DNSAnswer.answer(Self.query("api.example.com"), hosts: Self.hosts, names: &names)
        #expect(Self.code(first.reply) == 0 && Self.answers(first.reply) == 1)
        #expect(Array(first.reply!.suffix(4)) == [127, 77, 0, 1])
        #expect(first.reply![0] == 0x12 && first.reply![1] == 0x34 && first.reply![2] & 0x80 != 0, "the id echoed, a response")
        let again = DNSAnswer.answer(Self.query("API.example.COM", id: 7), hosts: Self.hosts, names: &names)
        #expect(Array(again.reply!.suffix(4)) == [127, 77, 0, 1], "one address a name")
        let wildcard = DNSAnswer.answer(Self.query("x.cdn.test"), hosts: Self.hosts, names: &names)
        #expect(Array(wildcard.reply!.suffix(4)) == [127, 77, 0, 2])
        #expect(names.name(for: IPAddress("127.77.0.2")!) == "x.cdn.test")
        // AAAA: no records (clients use the IPv4 one); any other type, and any other name: REFUSED.
        let v6 = DNSAnswer.answer(Self.query("api.example.com", type: 28), hosts: Self.hosts, names: &names)
        #expect(Self.code(v6.reply) == 0 && Self.answers(v6.reply) == 0 && v6.refused == nil)
        for type: UInt16 in [16, 15, 5, 255, 65, 33] {  // TXT, MX, CNAME, ANY, HTTPS, SRV
            let other = DNSAnswer.answer(Self.query("api.example.com", type: type), hosts: Self.hosts, names: &names)
            #expect(Self.code(other.reply) == 5 && Self.answers(other.reply) == 0 && other.refused?.type == type)
        }
        for name in ["secret-data.evil.com", "cdn.test", "api.example.com.evil", "localhost"] {
            let refused = DNSAnswer.answer(Self.query(name), hosts: Self.hosts, names: &names)
            #expect(Self.code(refused.reply) == 5 && Self.answers(refused.reply) == 0 && refused.refused?.name == name)
        }
    }

    @Test func malformedQueriesGetFormatErrorsOrNothing() {
        var names = NameTable()
        var pointer = Self.query("api.example.com")
        pointer.replaceSubrange(12..<13, with: [0xC0])  // a compression pointer where the name starts
        var dotted = [UInt8](Self.query("a").prefix(12)) + [7] + Array("api.exa".utf8) + [0, 0, 1, 0, 1]
        dotted[5] = 1
        var two = Self.query("api.example.com")
        two[5] = 2
        let cases: [([UInt8], UInt8?)] = [
            ([], nil), (Array(repeating: 0, count: 11), nil),
            (Self.query("api.example.com").map { $0 } + [], 0),
            (Array(Self.query("api.example.com").prefix(20)), 1),  // cut inside the name
            (pointer, 1), (two, 1),
            ([0x12, 0x34, 0x81, 0x80] + Array(Self.query("a").dropFirst(4)), nil),  // a response, not a query: dropped
            ([0x12, 0x34, 0x28, 0x00] + Array(Self.query("api.example.com").dropFirst(4)), 4),  // UPDATE: not implemented
        ]
        for (query, expected) in cases {
            #expect(Self.code(DNSAnswer.answer(query, hosts: Self.hosts, names: &names).reply) == expected, "\(query.prefix(16))")
        }
        // A label holding a dot is no name of the list, though it reads like one.
        #expect(Self.code(DNSAnswer.answer(dotted, hosts: AllowedHosts([try! AllowedHost(parsing: "api.exa")]), names: &names).reply) == 5)
        // Endless random names under a wildcard cannot grow the table without bound.
        for index in 0..<(NameTable.capacity + 5) {
            _ = DNSAnswer.answer(Self.query("n\(index).cdn.test"), hosts: Self.hosts, names: &names)
        }
        #expect(Self.code(DNSAnswer.answer(Self.query("one-more.cdn.test"), hosts: Self.hosts, names: &names).reply) == 2)
    }
}

/// The stub's reader takes any bytes the command sends: random and mutated
/// datagrams never trap, and every reply is a response echoing the query's id.
@Suite struct DNSStubHostileBytesTests {
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func randomAndMutatedQueriesGetAWellFormedReplyOrNone(seed: UInt64) {
        var random = Seeded(state: seed)
        var names = NameTable()
        let seeds = [DNSStubTests.query("api.example.com"), DNSStubTests.query("x.cdn.test", type: 28), DNSStubTests.query("a.b.c", type: 16)]
        var replies = 0
        for round in 0..<30_000 {
            var bytes: [UInt8]
            if round % 2 == 0 {
                bytes = seeds[Int(random.next() % 3)]
                for _ in 0..<(1 + Int(random.next() % 6)) {
                    let at = Int(random.next() % UInt64(bytes.count + 1))
                    switch random.next() % 3 {
                    case 0 where at < bytes.count: bytes[at] = UInt8(truncatingIfNeeded: random.next())
                    case 1: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: at)
                    default: if at < bytes.count { bytes.remove(at: at) }
                    }
                }
            } else {
                bytes = (0..<Int(random.next() % 80)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            }
            guard let reply = DNSAnswer.answer(bytes, hosts: DNSStubTests.hosts, names: &names).reply else { continue }
            replies += 1
            #expect(reply.count >= 12 && reply[0] == bytes[0] && reply[1] == bytes[1] && reply[2] & 0x80 != 0)
            #expect(reply.count <= 12 + 260 + 16, "a reply is a header, the question and one record at most")
        }
        #expect(replies > 1_000)
    }
}

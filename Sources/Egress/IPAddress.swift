import Glibc

/// An IPv4 or IPv6 address, parsed strictly (`inet_pton`: dotted quads, no
/// octal or hexadecimal forms), compared by its bytes.
public struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// 4 bytes or 16, network order.
    public let bytes: [UInt8]

    public init?(_ text: String) {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: v4) { Array($0) }
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            bytes = withUnsafeBytes(of: v6) { Array($0) }
            return
        }
        return nil
    }

    public init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    public var isV6: Bool { bytes.count == 16 }

    /// The IPv4 address inside an IPv4-mapped IPv6 one (::ffff:a.b.c.d).
    var unmapped: IPAddress {
        if isV6, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            return IPAddress(bytes: Array(bytes[12...]))!
        }
        return self
    }

    /// Loopback, private, link-local, unique-local, unspecified, shared
    /// (CGNAT), multicast, broadcast, reserved or documentation: where a
    /// name matched only by a wildcard entry may not lead (DNS rebinding).
    public var isInternal: Bool {
        let address = unmapped
        let b = address.bytes
        if !address.isV6 {
            switch b[0] {
            case 0, 10, 127: return true
            case 100: return b[1] & 0xC0 == 64        // 100.64/10
            case 169: return b[1] == 254              // 169.254/16
            case 172: return b[1] & 0xF0 == 16        // 172.16/12
            case 192: return (b[1] == 168) || (b[1] == 0 && (b[2] == 0 || b[2] == 2))  // 192.168/16, 192.0.0/24, 192.0.2/24
            case 198: return b[1] & 0xFE == 18 || (b[1] == 51 && b[2] == 100)           // 198.18/15, 198.51.100/24
            case 203: return b[1] == 0 && b[2] == 113
            default: return b[0] >= 224                // multicast, reserved, broadcast
            }
        }
        if b[0..<15].allSatisfy({ $0 == 0 }) { return true }                 // :: and ::1
        if b[0] & 0xFE == 0xFC { return true }                               // fc00::/7
        if b[0] == 0xFE, b[1] & 0xC0 == 0x80 { return true }                 // fe80::/10
        if b[0] == 0xFF { return true }                                      // multicast
        if b[0] == 0x20, b[1] == 0x01, b[2] == 0x0D, b[3] == 0xB8 { return true }  // 2001:db8::/32
        if b[0] == 0x00, b[1] == 0x64, b[2] == 0xFF, b[3] == 0x9B { return true }  // 64:ff9b::/96 (NAT64 of anything)
        if b[0] == 0x20, b[1] == 0x02 { return true }                        // 6to4 of anything
        return false
    }

    public var description: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = isV6 ? AF_INET6 : AF_INET
        let ok = bytes.withUnsafeBytes { raw in inet_ntop(family, raw.baseAddress, &text, socklen_t(text.count)) != nil }
        return ok ? String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
    }
}

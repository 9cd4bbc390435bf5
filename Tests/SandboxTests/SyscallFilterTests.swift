@preconcurrency import Glibc
import CSyscalls
import CSeccomp
import Foundation
import SystemPackage
import Testing
@testable import Sandbox

/// The oracle: libseccomp builds the same rule table.
extension SyscallFilter {
    /// The same rules built by libseccomp, which built the filter before.
    func compileWithLibseccomp() throws(SandboxError) -> [UInt8] {
        guard let context = seccomp_init(Self.errnoAction(Self.defaultErrno)) else {
            throw .setup(step: "seccomp_init", errno: .noMemory)
        }
        defer { seccomp_release(context) }
        try check(seccomp_attr_set(context, SCMP_FLTATR_ACT_BADARCH, Self.errnoAction(ENOSYS)), "seccomp_attr_set(badarch)")
        try check(seccomp_attr_set(context, SCMP_FLTATR_CTL_NNP, 0), "seccomp_attr_set(nnp)")
        for rule in rules() {
            let number = rule.number
            for ruleCase in rule.cases {
                // MASKED_EQ with a 32-bit mask compares the low 32 bits only, as ours does.
                var conditions = ruleCase.tests.map { test in
                    test.equal
                        ? scmp_arg_cmp(arg: test.argument, op: SCMP_CMP_MASKED_EQ, datum_a: UInt64(test.mask), datum_b: UInt64(test.value))
                        : scmp_arg_cmp(arg: test.argument, op: SCMP_CMP_NE, datum_a: UInt64(test.value), datum_b: 0)
                }
                let result = conditions.withUnsafeMutableBufferPointer { buffer in
                    seccomp_rule_add_array(context, ruleCase.action, number, UInt32(buffer.count), buffer.baseAddress)
                }
                try check(result, "seccomp_rule_add(\(number))")
            }
        }
        return try export(context)
    }

    func export(_ context: scmp_filter_ctx) throws(SandboxError) -> [UInt8] {
        let memfd = csb_memfd_create("seccomp-bpf")
        guard memfd >= 0 else { throw .setup(step: "memfd_create", errno: Errno(rawValue: errno)) }
        let file = OwnedDescriptor(taking: memfd)
        try check(seccomp_export_bpf(context, file.rawValue), "seccomp_export_bpf")
        let size = Int(lseek(file.rawValue, 0, SEEK_END))
        guard size > 0, size % 8 == 0 else { throw .setup(step: "seccomp_export_bpf", errno: .ioError) }
        var program = [UInt8](repeating: 0, count: size)
        let read = program.withUnsafeMutableBytes { pread(file.rawValue, $0.baseAddress, size, 0) }
        guard read == size else { throw .setup(step: "reading the seccomp filter", errno: .ioError) }
        return program
    }

    func check(_ result: CInt, _ step: String) throws(SandboxError) {
        // libseccomp returns -errno rather than setting errno.
        if result < 0 { throw .setup(step: step, errno: Errno(rawValue: -result)) }
    }
}

/// A classic BPF interpreter for seccomp programs: what the kernel runs,
/// for the instructions libseccomp and our assembler emit. An instruction it
/// does not know fails the test, so nothing passes by being skipped.
struct SeccompInterpreter {
    let program: [(code: UInt16, jt: UInt8, jf: UInt8, k: UInt32)]

    init(_ bytes: [UInt8]) {
        program = stride(from: 0, to: bytes.count, by: 8).map { at in
            (UInt16(bytes[at]) | UInt16(bytes[at + 1]) << 8, bytes[at + 2], bytes[at + 3],
             UInt32(bytes[at + 4]) | UInt32(bytes[at + 5]) << 8 | UInt32(bytes[at + 6]) << 16 | UInt32(bytes[at + 7]) << 24)
        }
    }

    /// The action for one call, and how many instructions it took.
    func run(nr: Int32, arch: UInt32, args: [UInt64]) -> (action: UInt32, steps: Int)? {
        var data = [UInt8](repeating: 0, count: 64)
        func put(_ value: UInt32, at offset: Int) { for i in 0..<4 { data[offset + i] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(i))) } }
        put(UInt32(bitPattern: nr), at: 0)
        put(arch, at: 4)
        for (i, arg) in args.enumerated() {
            put(UInt32(truncatingIfNeeded: arg), at: 16 + 8 * i)
            put(UInt32(truncatingIfNeeded: arg >> 32), at: 20 + 8 * i)
        }
        func word(_ offset: UInt32) -> UInt32 {
            (0..<4).reduce(UInt32(0)) { $0 | UInt32(data[Int(offset) + $1]) << (8 * UInt32($1)) }
        }
        var a: UInt32 = 0, x: UInt32 = 0
        var memory = [UInt32](repeating: 0, count: 16)
        var pc = 0
        var steps = 0
        while pc < program.count {
            let (code, jt, jf, k) = program[pc]
            steps += 1
            pc += 1
            switch code {
            case 0x20: a = word(k)                              // ld [k]
            case 0x00: a = k                                    // ld #k
            case 0x60: a = memory[Int(k)]                       // ld M[k]
            case 0x61: x = memory[Int(k)]                       // ldx M[k]
            case 0x02: memory[Int(k)] = a                       // st M[k]
            case 0x03: memory[Int(k)] = x                       // stx M[k]
            case 0x07: x = a                                    // tax
            case 0x87: a = x                                    // txa
            case 0x54: a &= k                                   // and #k
            case 0x44: a |= k                                   // or #k
            case 0x05: pc += Int(k)                             // ja
            case 0x15: pc += a == k ? Int(jt) : Int(jf)         // jeq #k
            case 0x25: pc += a > k ? Int(jt) : Int(jf)          // jgt #k
            case 0x35: pc += a >= k ? Int(jt) : Int(jf)         // jge #k
            case 0x45: pc += a & k != 0 ? Int(jt) : Int(jf)     // jset #k
            case 0x1d: pc += a == x ? Int(jt) : Int(jf)         // jeq x
            case 0x06: return (k, steps)                        // ret #k
            case 0x16: return (a, steps)                        // ret a
            default:
                Issue.record("unknown BPF instruction 0x\(String(code, radix: 16)) at \(pc - 1)")
                return nil
            }
        }
        Issue.record("the program fell off its end")
        return nil
    }
}

/// Our assembled filter against libseccomp's build of the same rules.
@Suite struct SyscallFilterTests {
    /// Every syscall the filter allows only with certain arguments is one a
    /// policy may not allow whole: a new argument rule without its entry in
    /// `argumentFiltered` would let a policy's `syscalls.allow` undo it.
    @Test func everyArgumentRuleIsGuardedFromPolicies() throws {
        // Supervised calls are guarded too: a policy cannot allow them whole.
        let guarded = Set((Array(SyscallFilter.argumentFiltered.keys) + SyscallFilter.supervised).compactMap(SyscallFilter.number))
        for network in [false, true] {
            for observe in [false, true] {
                var options = SyscallFilter.Options(networkClient: network)
                options.observeDenials = observe
                options.readOnlyMounts = !observe
                for rule in SyscallFilter(options: options).rules() where rule.cases.contains(where: { !$0.tests.isEmpty }) {
                    #expect(guarded.contains(rule.number), "syscall \(rule.number) has argument rules")
                }
            }
        }
    }

    static let foreign: UInt32 = 0x4000_0003  // AUDIT_ARCH_I386
    static let values: [UInt64] = [0, 1, 2, 5, 8, 10, 16, 17, 0xF, 0x11, 0x7FFF_FFFF, 0xFFFF_FFFF, 0x3D0F00,
                                   0x80, 0x20000, 0x0200_0000, 0x0400_0000, 0x0800_0000, 0x1000_0000, 0x2000_0000, 0x4000_0000]

    static var optionSets: [SyscallFilter.Options] {
        var sets: [SyscallFilter.Options] = []
        for network in [false, true] {
            for supervise in [false, true] {
                for observe in [false, true] where supervise || !observe {
                    var options = SyscallFilter.Options(networkClient: network, superviseMetadata: supervise)
                    options.observeDenials = observe
                    sets.append(options)
                }
                var mounts = SyscallFilter.Options(networkClient: network, superviseMetadata: supervise)
                mounts.readOnlyMounts = true
                sets.append(mounts)
            }
        }
        var extra = SyscallFilter.Options()
        extra.extraSyscalls = ["io_pgetevents", "sched_yield"]
        return sets + [extra]
    }

    @Test(arguments: optionSets.indices) func everySyscallAndArgumentGetsLibseccompsAnswer(index: Int) throws {
        let filter = SyscallFilter(options: Self.optionSets[index])
        let ours = SeccompInterpreter(try filter.compile())
        let oracle = SeccompInterpreter(try filter.compileWithLibseccomp())
        let native = SyscallFilter.x86_64
        var cases: [(Int32, UInt32, [UInt64])] = []
        for nr in Int32(0)..<1024 {
            for arch in [native, Self.foreign] { cases.append((nr, arch, [0, 0, 0])) }
        }
        for nr: Int32 in [0x4000_0000, 0x4000_0001, 0x4000_0101, -1, Int32.max] { cases.append((nr, native, [0, 0, 0])) }
        let conditional = ["clone", "socket", "socketpair", "memfd_create", "prlimit64", "personality"].compactMap(SyscallFilter.number)
        #expect(conditional.count == 6)
        for nr in conditional {
            for a0 in Self.values {
                for a1: UInt64 in [0, 1, 2, 5, 8, 0xF, 0x80801] {
                    for a2: UInt64 in [0, 1] { cases.append((nr, native, [a0, a1, a2])) }
                }
            }
        }
        var (ourSteps, oracleSteps, mismatches) = (0, 0, 0)
        for (nr, arch, args) in cases {
            // An interpreter that cannot finish a program is a failure, never a silent pass.
            guard let mine = ours.run(nr: nr, arch: arch, args: args), let theirs = oracle.run(nr: nr, arch: arch, args: args) else {
                Issue.record("syscall \(nr) arch \(String(arch, radix: 16)) args \(args): an interpreter did not reach a return")
                mismatches += 1
                continue
            }
            ourSteps += mine.steps
            oracleSteps += theirs.steps
            if mine.action != theirs.action {
                mismatches += 1
                if mismatches <= 5 { Issue.record("syscall \(nr) arch \(String(arch, radix: 16)) args \(args): ours \(String(mine.action, radix: 16)), libseccomp \(String(theirs.action, radix: 16))") }
            }
        }
        #expect(mismatches == 0)
        print("filter \(index): \(cases.count) calls, instructions per call: ours \(ourSteps / cases.count), libseccomp \(oracleSteps / cases.count)")
    }

    /// The kernel reads an int as its low 32 bits: so does the filter (CVE-2019-10063's class).
    @Test func highBitsChangeNothing() throws {
        let ours = SeccompInterpreter(try SyscallFilter(options: .init()).compile())
        let socket = try #require(SyscallFilter.number("socket"))
        let clone = try #require(SyscallFilter.number("clone"))
        let high: UInt64 = 1 << 32
        #expect(ours.run(nr: socket, arch: SyscallFilter.x86_64, args: [1 | high, 1, 0])?.action == SyscallFilter.errnoAction(EACCES))
        #expect(ours.run(nr: clone, arch: SyscallFilter.x86_64, args: [0x1000_0000 | high, 0, 0])?.action == SyscallFilter.errnoAction(EPERM))
        #expect(ours.run(nr: clone, arch: SyscallFilter.x86_64, args: [0x3D0F00 | high, 0, 0])?.action == SyscallFilter.allowAction)
    }
}

@preconcurrency import Glibc
import CLaunch
import CSyscalls

/// Every byte the keeper and the child read, copied into memory this object
/// owns (freed with it), and the two C plans pointing into it: the keeper
/// is a fork and reads its own copy of this memory, which must stay put
/// until `csb_spawn_kept` returns. Building it takes no closure per pointer.
final class LaunchImage {
    private(set) var child = csb_child_plan()
    private(set) var keeper = csb_keeper_plan()
    private var allocations: [UnsafeMutableRawPointer] = []

    init() {}

    deinit {
        for allocation in allocations { free(allocation) }
    }

    /// A NUL-terminated copy of `bytes`.
    func string(_ bytes: [UInt8]) -> UnsafePointer<CChar> {
        let copy = keep(malloc(bytes.count + 1)!).assumingMemoryBound(to: CChar.self)
        for (offset, byte) in bytes.enumerated() { copy[offset] = CChar(bitPattern: byte) }
        copy[bytes.count] = 0
        return UnsafePointer(copy)
    }

    func string(_ text: String) -> UnsafePointer<CChar> { string(Array(text.utf8)) }

    /// A NULL-terminated array of NUL-terminated copies (argv, envp).
    func strings(_ entries: [[UInt8]]) -> UnsafePointer<UnsafeMutablePointer<CChar>?> {
        let array = keep(malloc(MemoryLayout<UnsafeMutablePointer<CChar>?>.stride * (entries.count + 1))!)
            .bindMemory(to: UnsafeMutablePointer<CChar>?.self, capacity: entries.count + 1)
        for (index, entry) in entries.enumerated() { array[index] = UnsafeMutablePointer(mutating: string(entry)) }
        array[entries.count] = nil
        return UnsafePointer(array)
    }

    /// A copy of `values`, nil when there are none.
    func array<T>(_ values: [T]) -> UnsafePointer<T>? {
        guard !values.isEmpty else { return nil }
        let copy = keep(malloc(MemoryLayout<T>.stride * values.count)!).bindMemory(to: T.self, capacity: values.count)
        copy.initialize(from: values, count: values.count)
        return UnsafePointer(copy)
    }

    /// A copy of raw bytes (a BPF program), nil when there are none.
    func bytes(_ values: [UInt8]?) -> UnsafeRawPointer? {
        guard let values, !values.isEmpty else { return nil }
        let copy = keep(malloc(values.count)!)
        values.withUnsafeBytes { copy.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        return UnsafeRawPointer(copy)
    }

    private func keep(_ allocation: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer {
        allocations.append(allocation)
        return allocation
    }

    /// Fills the child's plan; `body` sets what the caller decides.
    func planChild(_ body: (inout csb_child_plan, LaunchImage) -> Void) { body(&child, self) }

    /// Fills the keeper's plan.
    func planKeeper(_ body: (inout csb_keeper_plan, LaunchImage) -> Void) { body(&keeper, self) }

    /// Forks the keeper with both plans (see `csb_spawn_kept`).
    func spawn(keeperPID: inout pid_t, pidfd: inout CInt, report: inout CInt) -> CInt {
        csb_spawn_kept(&child, &keeper, &keeperPID, &pidfd, &report)
    }
}

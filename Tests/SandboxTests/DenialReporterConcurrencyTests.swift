import Foundation
import Testing
@testable import Sandbox

/// Denials come from several threads of the launcher at once (the
/// supervisor's, the network proxy's): the attack review made the root
/// launcher crash (SIGSEGV) by racing denied opens against refused DNS names.
@Suite struct DenialReporterConcurrencyTests {
    @Test func recordsFromManyThreadsAtOnceAreAllCounted() {
        let reporter = DenialReporter(terminal: nil, log: nil)
        let threads = 4, each = 20_000
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for index in 0..<each {
                reporter.record(Denial(
                    operation: index % 2 == 0 ? .read : .network, layer: .proxy, syscall: "DNS", path: Array("n\(thread)-\(index % 5_000)".utf8),
                    reason: "is not an allowed host", errno: EACCES))
            }
        }
        #expect(reporter.total == threads * each)
        #expect(reporter.byOperation[.read] == threads * each / 2 && reporter.byOperation[.network] == threads * each / 2)
        #expect(reporter.distinct.count == DenialReporter.distinctLimit)
    }
}

import Foundation
import Testing
@testable import Staging
import SystemKit
import SystemPackage

/// Attacks on staged grants found in the attack review of issue #32; each
/// test fails on f7e3b61.
@Suite("Staged grants: attack review")
struct StagingAttackTests {
    /// "b -> ." stays in the folder, and so does "b/../x" read as text; but the
    /// kernel resolves "b" first, so "leak -> b/../secret" names the folder's
    /// sibling. A link's text may only climb ("..") before it descends.
    @Test func aLinkThroughAnotherStagedLinkNeverLeadsOut() throws {
        let home = StagingHome()
        let area = try home.area()
        _ = try area.prepare(host: try home.vaultDescriptor(), as: home.staged)
        #expect(StagingHome.shell("mkdir d; ln -s . b; ln -s b/../secret leak; ln -s .. d/up; ln -s up/../../secret d/leak2; ln -s ../b d/ok",
            in: home.clonePath) == 0)
        let outcomes = try area.accept(host: try home.vaultDescriptor(), hostPath: FilePath(home.vault), savingComputer: "t")
        func result(_ path: String) -> ReviewOutcome.Result? { outcomes.first { $0.change.path == Array(path.utf8) }?.result }
        guard case .refused = result("leak"), case .refused = result("d/leak2") else {
            Issue.record("a link leading out through another link was made: \(outcomes)")
            return
        }
        #expect(result("b") == .applied)
        #expect(result("d/ok") == .applied, "climbing first, then descending, stays a link")
        var status = stat()
        #expect(lstat(home.vault + "/leak", &status) != 0)
        #expect(Applier.staysInside(Array("../x".utf8), at: Array("d".utf8)))
        #expect(!Applier.staysInside(Array("x/../y".utf8), at: Array("d".utf8)))
    }
}
